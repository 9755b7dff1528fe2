"""A member chats (WALKTHROUGH.md): start a conversation, watch the reply stream in, reload and see the history;
another tenant's admin gets a 404 for it. Served by Daphne (asgi_live_server), so the websocket is real."""

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from agents.models import Agent
from agents.services import agent_create, agent_publish, conversation_start
from memory.models import Conversation, Message
from tenants.models import Tenant
from tenants.scope import tenant_scope
from tests.browser.pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AGENT_NAME = "窗口测试助手 / Window test assistant"
SCREENS = Path(__file__).resolve().parents[2] / "bench" / "screens"


@pytest.fixture
def demo(transactional_db):
    call_command("seed_demo", password=PASSWORD)
    tenant = Tenant.objects.get(slug="energy")
    with tenant_scope(tenant):
        agent = agent_create(
            tenant=tenant,
            name=AGENT_NAME,
            description="Answers in the browser test.",
            system_prompt="You are a helpful assistant.",
            token_overflow_config={"strategy": "sliding_window", "max_tokens": 4096},
        )
        agent_publish(agent=agent, user=None)
    return tenant


SAMPLER = """() => {
  window.__lengths = [];
  window.__sampler = setInterval(() => {
    const body = document.querySelector('.chat-assistant.chat-streaming .chat-body');
    if (body) window.__lengths.push(body.textContent.length);
  }, 5);
}"""


def test_member_chats_and_the_reply_streams_in(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    page = page_for("zh-CN")
    log_in(page, base, "energy-admin")
    page.click("[data-card=chat] a")
    page.wait_for_url(f"{base}/chat/")

    page.select_option("#id_agent", label=AGENT_NAME)
    page.click("#new-conversation-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/chat/\d+/$"))
    conversation_id = int(page.url.rstrip("/").rsplit("/", 1)[-1])
    assert page.locator("#strategy-badge").get_attribute("data-strategy") == "sliding_window"

    page.evaluate(SAMPLER)
    page.fill("#chat-input", "你好")
    page.press("#chat-input", "Enter")
    # The user's message shows at once; the reply streams, then is replaced by its rendered form.
    assert page.locator(".chat-user .chat-body").last.inner_text() == "你好"
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=20_000)
    lengths = page.evaluate("() => { clearInterval(window.__sampler); return window.__lengths; }")
    growing = sorted({length for length in lengths if length > 0})
    assert len(growing) >= 2, f"the reply did not grow in steps: {lengths}"
    reply = page.locator(".chat-assistant .chat-body").last.inner_text()
    assert "演示模型" in reply
    assert page.locator(".chat-assistant.chat-streaming").count() == 0
    assert page.locator("#chat-stop").is_hidden()
    if os.environ.get("SCREENSHOTS") == "1":
        SCREENS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENS / "chat.png"), full_page=True)

    with tenant_scope(demo):
        assert Conversation.objects.get(pk=conversation_id).agent.name == AGENT_NAME
        roles = list(Message.objects.filter(conversation_id=conversation_id).values_list("role", flat=True))
    assert roles == ["user", "assistant"]

    # Back later: the history is on the page, rendered by the server.
    page.reload()
    assert page.locator(".chat-user .chat-body").inner_text() == "你好"
    assert "演示模型" in page.locator(".chat-assistant .chat-body").inner_text()
    assert page.locator(".chat-assistant .chat-usage").count() == 1
    # The list shows it.
    page.goto(f"{base}/chat/")
    assert page.locator(f"[data-conversation='{conversation_id}']").count() == 1

    # Another tenant's admin: 404, in the page and nothing of it shown.
    other = page_for("en-US")
    log_in(other, base, "restaurant-admin")
    response = other.goto(f"{base}/chat/{conversation_id}/")
    assert response.status == 404
    assert "你好" not in other.content()


def test_a_reload_while_the_reply_is_written_shows_it_once_and_whole(asgi_live_server, demo, page_for):
    base = asgi_live_server.url
    with tenant_scope(demo):
        agent = Agent.objects.get(name=AGENT_NAME)
        conversation = conversation_start(agent=agent, user=get_user_model().objects.get(username="energy-admin"))
    page = page_for("zh-CN")
    log_in(page, base, "energy-admin")
    page.goto(f"{base}/chat/{conversation.pk}/")
    page.fill("#chat-input", "你好")
    page.press("#chat-input", "Enter")
    page.wait_for_function("() => (document.querySelector('.chat-streaming .chat-body') || {}).textContent")
    # Closing the tab mid-reply and coming back: the reply goes on, the page catches up from the turn's start.
    page.reload()
    # The first assistant bubble: streaming again from the catch-up, or (if the reply ended first) the stored one.
    resumed_mid_reply = "chat-streaming" in (page.wait_for_selector(".chat-assistant").get_attribute("class") or "")
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=20_000)
    with tenant_scope(demo):
        stored = Message.objects.get(conversation=conversation, role="assistant").content
    assert page.locator(".chat-assistant").count() == 1
    assert page.locator(".chat-user").count() == 1
    assert page.locator(".chat-assistant .chat-body").inner_text().strip() == stored.strip()
    assert resumed_mid_reply, "the reply ended before the page came back: nothing was caught up"


def test_a_frame_lost_on_the_way_is_caught_up_by_the_page_without_a_reload(
    asgi_live_server, demo, page_for, monkeypatch
):
    """The server thinks it sent a delta that never arrives: the next frame shows the page a hole in the seqs, and
    the page asks for the frames after its last one at once, so its text never skips a piece."""
    from chat.consumers import ConversationSocket

    forward, replay = ConversationSocket._forward, ConversationSocket._replay
    deltas, lost, catch_ups = [], [], []

    async def lossy_forward(self, seq, body):
        if '"type":"delta"' in body and seq > self.sent_seq:
            deltas.append(seq)
            if len(deltas) == 3 and not lost:
                lost.append(seq)
                self.sent_seq = seq  # "sent": lost between the server and the page
                return
        await forward(self, seq, body)

    async def recording_replay(self, after_seq):
        catch_ups.append(after_seq)
        await replay(self, after_seq)

    monkeypatch.setattr(ConversationSocket, "_forward", lossy_forward)
    monkeypatch.setattr(ConversationSocket, "_replay", recording_replay)
    with tenant_scope(demo):
        agent = Agent.objects.get(name=AGENT_NAME)
        conversation = conversation_start(agent=agent, user=get_user_model().objects.get(username="energy-admin"))
    page = page_for("zh-CN")
    log_in(page, base := asgi_live_server.url, "energy-admin")
    page.goto(f"{base}/chat/{conversation.pk}/")
    page.wait_for_function("() => !document.getElementById('chat-status').textContent")
    page.evaluate(SAMPLER.replace("body.textContent.length", "body.textContent"))
    page.fill("#chat-input", "你好")
    page.press("#chat-input", "Enter")
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=20_000)
    texts = page.evaluate("() => { clearInterval(window.__sampler); return window.__lengths; }")

    assert lost, "no delta was dropped: the test did not inject its fault"
    assert lost[0] - 1 in catch_ups[1:], catch_ups  # after the page's first catch_up (on open): one for the hole
    with tenant_scope(demo):
        stored = Message.objects.get(conversation=conversation, role="assistant").content
    assert texts and all(stored.startswith(text) for text in texts), [t for t in texts if not stored.startswith(t)]
    assert page.locator(".chat-assistant").count() == 1
    assert page.locator(".chat-assistant .chat-body").inner_text().strip() == stored.strip()


def _message_limit(tenant) -> int:
    from agents.config import agent_config
    from agents.limits import message_limit

    with tenant_scope(tenant):
        agent = Agent.objects.get(name=AGENT_NAME)
        return message_limit(agent_config(agent=agent, version=agent.published_version())).chars


def test_the_composer_offers_send_only_for_something_it_can_send(asgi_live_server, demo, page_for):
    """A newcomer's findings: an empty message was ignored without a word, a 20,000-character one accepted (the limit
    is now the agent's own)."""
    base = asgi_live_server.url
    page = page_for("zh-CN")
    log_in(page, base, "energy-member")
    page.goto(f"{base}/chat/")
    page.select_option("#id_agent", label=AGENT_NAME)
    page.click("#new-conversation-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/chat/\d+/$"))
    send = page.locator("#chat-send")
    assert send.is_disabled()
    page.fill("#chat-input", "   \n  ")
    assert send.is_disabled()
    page.fill("#chat-input", "你好")
    assert send.is_enabled()
    # The agent's own limit (its 4096-token window after the prompt and the reserve), which the server gives the page.
    limit = _message_limit(demo)
    assert 0 < limit < 20_000
    page.fill("#chat-input", "字" * (limit + 1))
    assert send.is_disabled()
    counter = page.locator("#chat-count")
    assert counter.is_visible() and f"{limit + 1} / {limit}" in counter.inner_text() and "缩短" in counter.inner_text()
    page.press("#chat-input", "Enter")  # refused on the page: nothing is sent
    assert page.locator(".chat-user").count() == 0
    page.fill("#chat-input", "短一点")
    page.press("#chat-input", "Enter")
    page.wait_for_selector(".chat-assistant .chat-usage", timeout=20_000)
    assert send.is_disabled() and not counter.is_visible()
