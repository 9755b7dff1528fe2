"""Know before you publish (issue 39), in Chromium, in Chinese: a tenant admin rates a reply 👎 with a comment and
turns it into an evaluation case from the chat, turns the publish gate on, is refused Publish before the draft ran,
changes the draft, runs the dataset against the published version and the draft (live progress to the end), sees
them compared (the case fixed), and publishes through the gate; the new version records the gate's decision.

The model is the scripted one (llm/fake_server.py), offline: the agent answers by its system prompt, and the judge
(the agent's own model, scoring the rubric made from the comment) gives 5 to a reply that names the south and 2 to
any other."""

from __future__ import annotations

import json
import re

import pytest

from agents.models import AgentVersion
from evals.models import Case, CaseSource, Gate
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.browser.pages import PASSWORD, log_in, say, start_conversation
from tests.evals.conftest import JUDGE_MARK, make_agent, make_provider
from tests.factories import MembershipFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "太阳能板装在哪个方向最好？"
COMMENT = "要说清楚屋顶朝哪个方向发电最多"
OLD_REPLY = "随便装都可以。"
NEW_PROMPT = "你是太阳能顾问。回答安装方向时，建议朝南。"
NEW_REPLY = "朝南安装，全天日照最多，发电量最高。"


def _score(score: int) -> dict:
    return {"text": json.dumps({"score": score, "reason": "按评分标准"}, ensure_ascii=False)}


@pytest.fixture
def admin(tenant, scripted_llm):
    """An admin of the tenant and a published agent (v1) on the scripted model."""
    scripted_llm.set_rules(
        # The judge: a reply naming the south meets the rubric; any other does not.
        {"when": {"last_message": {"regex": rf"(?s){re.escape(JUDGE_MARK)}.*朝南安装"}}, "reply": _score(5)},
        {"when": {"last_message": {"contains": JUDGE_MARK}}, "reply": _score(2)},
        # The agent: the changed draft advises the south; the published version does not.
        {"when": {"system_prompt": {"contains": "朝南"}}, "reply": {"text": NEW_REPLY}},
        {"when": {}, "reply": {"text": OLD_REPLY}},
    )
    agent = make_agent(tenant, make_provider(tenant, scripted_llm), name="太阳能顾问")
    user = UserFactory(username="eval-admin")
    user.set_password(PASSWORD)
    user.save()
    MembershipFactory(tenant=tenant, user=user, role=Role.ADMIN)
    return agent


def _run(page, base: str, dataset_id: int, version_label: str) -> str:
    """Run the dataset against a version from its page; wait on the run page until it ends; the run's URL."""
    page.goto(f"{base}/evals/datasets/{dataset_id}/")
    page.select_option("#id_version", label=version_label)
    with page.expect_navigation():
        page.click("#start-run")
    assert re.search(r"/evals/runs/\d+/$", page.url)
    # The page follows the run live, then shows every result once it ends.
    page.wait_for_selector("#run-progress[data-finished='1']", timeout=60_000)
    return page.url


def test_an_admin_makes_a_case_of_a_thumbs_down_compares_versions_and_publishes_through_the_gate(
    asgi_live_server, tenant, admin, page_for
):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    log_in(page, base, "eval-admin")

    # 1. The published version answers; the admin rates the reply 👎 with a comment.
    start_conversation(page, base, admin.name)
    assert say(page, QUESTION) == OLD_REPLY
    reply = page.locator(".chat-assistant").last
    make_case = reply.locator(".chat-feedback-case")
    assert make_case.is_hidden()  # offered on a 👎 only
    reply.locator(".chat-feedback-down").click()
    reply.locator(".chat-feedback-comment").fill(COMMENT)
    reply.locator(".chat-feedback-form button[type=submit]").click()
    note = reply.locator(".chat-feedback-note").element_handle()
    page.wait_for_function("el => el.textContent.trim() !== ''", arg=note)  # the rating and comment are saved

    # 2. One click makes the case; the note links to it.
    make_case.locator("button").click()
    link = reply.locator(".chat-feedback-note a.chat-feedback-case-link")
    link.wait_for()
    assert "测试用例" in reply.locator(".chat-feedback-note").inner_text()
    with tenant_scope(tenant):
        case = Case.objects.select_related("dataset").get()
    assert case.source == CaseSource.FEEDBACK and case.turns == [QUESTION]
    assert case.expectations == [{"kind": "rubric", "rubric": COMMENT, "min_score": 4}]
    with page.expect_navigation():
        link.click()
    assert page.url == f"{base}/evals/cases/{case.pk}/"
    assert page.locator("#case-from-feedback").is_visible()
    assert page.input_value("#id_expect-0-rubric") == COMMENT
    assert page.locator("#field-expect-0-text").is_hidden()  # only the rubric's fields are shown

    # 3. The publish gate: on, on the feedback dataset, every case must pass.
    page.goto(f"{base}/evals/agents/{admin.pk}/gate/")
    page.check("#id_enabled")
    page.select_option("#id_dataset", value=str(case.dataset_id))
    page.fill("#id_threshold", "100")
    with page.expect_navigation():
        page.click("#save-gate")
    assert page.locator("#gate-summary").inner_text().count("100%") == 1
    with tenant_scope(tenant):
        assert Gate.objects.get(agent=admin).enabled

    # 4. The draft is changed; Publish is refused while no run of this draft passed.
    page.goto(f"{base}/agents/{admin.pk}/edit/")
    page.fill("#id_system_prompt", NEW_PROMPT)
    with page.expect_navigation():
        page.click("#save-agent")
    page.goto(f"{base}/agents/{admin.pk}/publish/")
    with page.expect_navigation():
        page.click("#confirm-publish")
    assert page.locator(".message.error").count() == 1
    with tenant_scope(tenant):
        assert AgentVersion.objects.filter(agent=admin).count() == 1

    # 5. The dataset runs against the published version (fails) and the draft (passes).
    published_run = _run(page, base, case.dataset_id, "v1")
    assert page.locator("#results tr[data-status=failed]").count() == 1
    assert OLD_REPLY in page.locator("#results .eval-reply").inner_text()
    assert page.locator("#results .conversation-link").count() == 1
    draft_run = _run(page, base, case.dataset_id, "草稿（当前内容）")
    assert page.locator("#results tr[data-status=passed]").count() == 1
    assert page.locator("[data-metric=pass_rate]").inner_text() == "100%"

    # 6. Compared: the case is fixed; the two replies side by side.
    page.select_option("#compare-other", value=published_run.rstrip("/").rsplit("/", 1)[1])
    with page.expect_navigation():
        page.click("#compare-runs")
    assert page.locator("[data-change=fixed]").first.inner_text() == "1"
    assert page.locator("[data-change=broken]").first.inner_text() == "0"
    row = page.locator("#compare-rows tr.change-fixed")
    assert OLD_REPLY in row.inner_text() and NEW_REPLY in row.inner_text()
    assert "已修复" in row.inner_text()

    # 7. The agent page shows the latest run per version; Publish passes the gate, which the version records.
    page.goto(f"{base}/agents/{admin.pk}/")
    runs = page.locator("#latest-eval-runs tbody tr")
    assert runs.count() == 2 and page.locator("#compare-latest").is_visible()
    assert runs.first.get_attribute("data-run") == draft_run.rstrip("/").rsplit("/", 1)[1]
    page.goto(f"{base}/agents/{admin.pk}/publish/")
    with page.expect_navigation():
        page.click("#confirm-publish")
    assert "v2" in page.locator("#publish-state").inner_text()
    with tenant_scope(tenant):
        version = AgentVersion.objects.get(agent=admin, number=2)
    assert version.gate["allowed"] is True and version.gate["required"] is True
    assert str(version.gate["run"]) == draft_run.rstrip("/").rsplit("/", 1)[1]
