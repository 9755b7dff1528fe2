"""Issue 36 in Chromium: a reply cut by the agent's longest reply (单次回复最多 Token 数) ends with a note under it,
on the chat page and in the widget, as it streams in (the done frame's finish_reason "length") and after a reload;
a reply that ended by itself has none. The scripted model writes 60 tokens; the agent allows 5."""

from __future__ import annotations

import pytest

from agents.services import agent_publish, agent_update
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.browser import test_widget
from tests.browser.pages import PASSWORD, log_in, say, start_conversation
from tests.factories import MembershipFactory, UserFactory
from tests.widget.helpers import make_embed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

host_site = test_widget.host_site
NOTE_ZH = "回复在此处被截断：已达到智能体的“单次回复最多 Token 数”上限。"


def _capped(tenant, scripted_llm, **fields):
    scripted_llm.set_rules({"when": {"last_user_message": "长"}, "reply": {"text_tokens": 60}},
                           {"when": {}, "reply": {"text": "好的。"}})  # fmt: skip
    embed = make_embed(tenant, scripted_llm.base_url, **fields)
    with tenant_scope(tenant):
        agent_update(agent=embed.agent, max_reply_tokens=5)
        agent_publish(agent=embed.agent, user=None)
    return embed


def test_the_chat_page_notes_a_cut_reply_live_and_after_a_reload(asgi_live_server, tenant, scripted_llm, page_for):
    embed = _capped(tenant, scripted_llm)
    user = UserFactory(username="reader")
    user.set_password(PASSWORD)
    user.save()
    MembershipFactory(tenant=tenant, user=user, role=Role.MEMBER)
    page = page_for("zh-CN")
    log_in(page, asgi_live_server.url, "reader")
    start_conversation(page, asgi_live_server.url, embed.agent.name)
    say(page, "说得长一点")
    assert page.locator(".chat-assistant").last.locator(".chat-cut-note").inner_text() == NOTE_ZH
    say(page, "短的")
    assert page.locator(".chat-assistant").last.locator(".chat-cut-note").count() == 0
    page.reload()
    notes = page.locator(".chat-assistant .chat-cut-note")
    assert notes.count() == 1 and notes.inner_text() == NOTE_ZH


def test_the_widget_notes_a_cut_reply_live_and_after_a_reload(asgi_live_server, tenant, scripted_llm, host_site,
                                                               page_for):  # fmt: skip
    folder, port = host_site
    embed = _capped(tenant, scripted_llm)
    embed.allowed_origins = f"http://127.0.0.1:{port}"
    with tenant_scope(tenant):
        embed.save()
    html = test_widget.HOST_PAGE.format(lang="zh-CN", platform=asgi_live_server.url, token=embed.token)
    (folder / "zh.html").write_text(html, encoding="utf-8")
    page = page_for("zh-CN")
    page.set_default_timeout(30_000)
    frame, _ticket, _visitor = test_widget._open_chat(page, f"http://127.0.0.1:{port}/zh.html", embed.token)
    test_widget._say(frame, "说得长一点")
    frame.locator(".chat-assistant .chat-feedback").wait_for(timeout=20_000)  # done: the rating buttons
    assert frame.locator(".chat-assistant .chat-cut-note").inner_text() == NOTE_ZH
    frame, _ticket, _visitor = test_widget._open_chat(page, f"http://127.0.0.1:{port}/zh.html", embed.token)
    frame.locator(".chat-assistant").first.wait_for()
    assert frame.locator(".chat-assistant .chat-cut-note").inner_text() == NOTE_ZH
