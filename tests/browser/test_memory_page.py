"""A member opens Memory from the home page: the event graph is drawn (an SVG with its relations labelled), the
table lists the events; deleting one goes through a confirmation and the event is gone from the table and the
picture. All of it under the site's Content-Security-Policy, without a violation."""

import os

import pytest

from agents.services import agent_create
from memory.longterm import store
from memory.models import Event
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.browser.pages import PASSWORD, log_in
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.memory.memory_data import remember_story

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def story(transactional_db):
    store.clear_caches()
    tenant = TenantFactory(name="Energy", slug="energy")
    user = UserFactory(username="memory-member", password=PASSWORD)
    MembershipFactory(tenant=tenant, user=user, role=Role.MEMBER)
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Logistics helper")
        return tenant, remember_story(user=user, agent_id=agent.pk)


def test_the_memory_page_draws_the_graph_and_deletes_an_event(live_server, story, page_for):
    tenant, mine = story
    page = page_for("en-US")
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text) if "Content Security Policy" in message.text
            else None)  # fmt: skip
    log_in(page, live_server.url, "memory-member")
    page.click("[data-card=memory] a")
    page.wait_for_url(f"{live_server.url}/memory/")

    graph = page.locator("svg#event-graph")
    assert graph.is_visible()
    assert graph.locator("a.node").count() == 4
    box = graph.bounding_box()
    assert box["width"] > 300 and box["height"] > 100  # drawn at its size, not collapsed
    labels = graph.locator("text.edge-label").all_text_contents()
    assert "causes" in labels and "resolves" in labels and "superseded by" in labels
    superseded = graph.locator(f"a.node[data-event='{mine.port_closed.event_id}']")
    assert "superseded" in superseded.get_attribute("class")
    # The node's own style marks it (the CSS file applies: dashed outline).
    dash = superseded.locator("rect").evaluate("rect => getComputedStyle(rect).strokeDasharray")
    assert dash not in ("", "none")

    if os.environ.get("SCREENSHOTS") == "1":
        page.screenshot(path=os.environ.get("SCREENSHOT_PATH", "memory-page.png"), full_page=True)

    row = page.locator(f"#event-table tr[data-event='{mine.rerouted.event_id}']")
    assert "Rerouted order 42 through port Birch" in row.inner_text()
    row.locator("a.delete-link").click()
    page.wait_for_url(f"{live_server.url}/memory/events/{mine.rerouted.pk}/delete/")
    assert "Rerouted order 42 through port Birch" in page.locator("#delete-what").inner_text()
    with page.expect_navigation():
        page.click("#confirm-delete-button")
    assert "Deleted the event" in page.locator(".messages").inner_text()
    assert page.locator(f"#event-table tr[data-event='{mine.rerouted.event_id}']").count() == 0
    assert page.locator(f"svg#event-graph a.node[data-event='{mine.rerouted.event_id}']").count() == 0
    assert page.locator("svg#event-graph a.node").count() == 3
    assert "resolves" not in page.locator("svg#event-graph text.edge-label").all_text_contents()
    with tenant_scope(tenant):
        assert not Event.objects.filter(pk=mine.rerouted.pk).exists()
    assert violations == [], violations


# A cell's text as lines: how many line boxes its characters take (one character a line is the defect).
CELL_LINES = """cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
    return {text: cell.innerText.trim(), lines: tops.size};
}"""


def test_the_memory_table_reads_in_chinese_at_1280px(live_server, story, page_for):
    """A newcomer's findings: actions (report), entity types (PLACE) and event ids (evt_…) showed raw, and the
    narrow columns (执行者, 已被取代为, 删除) wrapped one character a line."""
    page = page_for("zh-CN")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, live_server.url, "memory-member")
    page.goto(f"{live_server.url}/memory/")
    table = page.locator("#event-table")
    text = table.inner_text()
    assert "报告" in text and "决定" in text and "地点" in text and "订单" in text
    for raw in ("report", "decision", "PLACE", "ORDER", "evt_"):
        assert raw not in text, raw
    headers = table.locator("thead th").evaluate_all(f"cells => cells.map({CELL_LINES})")
    assert [h["text"] for h in headers if h["text"]] == ["时间", "智能体", "执行者", "动作", "摘要", "实体", "状态",
                                                         "已被取代为"]  # fmt: skip
    assert all(h["lines"] == 1 for h in headers if h["text"]), headers
    cells = table.locator("tbody td").evaluate_all(f"cells => cells.map({CELL_LINES})")
    squeezed = [c for c in cells if len(c["text"]) > 1 and c["lines"] >= len(c["text"])]
    assert squeezed == [], squeezed
    assert all(c["lines"] == 1 for c in cells if c["text"] == "删除")
