"""The website widget in Chromium (docs/embed.md): a plain host page on another origin (a second port) pastes the
snippet; the bubble opens the agent's chat in a frame, a reply streams, a refused origin gets nothing, a second
visitor (another browser context) does not see the first one's conversation, and the rate limit answers in words.
No URL the browser asks for (pages, scripts, the socket) carries the visitor's ticket or id (issue 34).
A member rates a reply on the chat page the same way."""

from __future__ import annotations

import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from memory.models import Feedback
from tenants.models import Role
from tenants.scope import tenant_scope
from tests.browser.pages import PASSWORD, log_in, say, start_conversation
from tests.factories import MembershipFactory, UserFactory
from tests.widget.helpers import make_embed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMAGES = Path(__file__).resolve().parents[2] / "docs" / "img"
HOST_PAGE = """<!DOCTYPE html>
<html lang="{lang}"><head><meta charset="utf-8"><title>Sunny Panels shop</title></head>
<body><h1>Sunny Panels</h1><p>Solar panels for homes and small businesses. Ask our assistant anything.</p>
<script src="{platform}/embed.js" data-token="{token}" async></script>
</body></html>
"""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        """No request lines in the test output."""


@pytest.fixture
def host_site(tmp_path):
    """A plain website on another port of this machine: http://127.0.0.1:<port>/ (allowed) and
    http://localhost:<port>/ (the same server under another origin, not allowed)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, server.server_address[1]
    server.shutdown()
    server.server_close()


def _open_widget(page, url: str):
    page.goto(url)
    page.click("button.agentplat-bubble")
    return page.frame_locator("iframe.agentplat-frame")


def _ready(frame):
    """The frame's chat page with its script running: before it, Enter in the message box only adds a line (the
    frame loads on the bubble's click, and nothing else waits for it)."""
    frame.locator("#chat-form[data-ready]").wait_for()
    return frame


def _watch(page) -> list[str]:
    """Every URL the page and its frames ask for from now on, the socket's too."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url))
    page.on("websocket", lambda socket: seen.append(socket.url))
    return seen


def _open_chat(page, url: str, token: str):
    """Open the widget and wait for its chat; the ticket and visitor id boot.js posted to the chat page."""
    chat = f"/embed/{token}/chat/"
    with page.expect_request(lambda request: request.url.endswith(chat) and request.method == "POST") as posted:
        frame = _ready(_open_widget(page, url))
    body = parse_qs(posted.value.post_data or "")
    assert set(body) == {"ticket", "visitor"} and re.fullmatch(r"[0-9a-f]{32}", body["visitor"][0])
    return frame, body["ticket"][0], body["visitor"][0]


def _no_credential_in(seen: list[str], ticket: str, visitor: str) -> None:
    assert any("/ws/embed/" in url for url in seen) and any("/chat/" in url for url in seen), seen
    for url in seen:
        assert ticket not in url and visitor not in url and "ticket=" not in url and "visitor=" not in url, url


def _say(frame, text: str) -> None:
    frame.locator("#chat-input").fill(text)
    frame.locator("#chat-input").press("Enter")


def test_the_widget_on_another_origin(asgi_live_server, tenant, scripted_llm, host_site, page_for):
    folder, port = host_site
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Our panels carry a 25-year warranty.", "chunk_size": 3,
                                                  "delay_ms": 20}})  # fmt: skip
    embed = make_embed(tenant, scripted_llm.base_url, visitor_messages_per_hour=2)
    embed.allowed_origins = f"http://127.0.0.1:{port}"
    with tenant_scope(tenant):
        embed.save()
    for name, lang in (("en.html", "en"), ("zh.html", "zh-CN")):
        html = HOST_PAGE.format(lang=lang, platform=asgi_live_server.url, token=embed.token)
        (folder / name).write_text(html, encoding="utf-8")

    # A visitor on the allowed site: the bubble opens the chat and the reply streams in.
    page = page_for("en-US")
    page.set_default_timeout(30_000)  # a loaded machine (CI runs the suite on 2 cores)
    seen = _watch(page)
    frame, ticket, visitor = _open_chat(page, f"http://127.0.0.1:{port}/en.html", embed.token)
    _say(frame, "Warranty?")
    frame.locator(".chat-assistant .chat-feedback").wait_for(timeout=20_000)  # done: the reply's rating buttons
    assert "25-year warranty" in frame.locator(".chat-assistant .chat-body").last.inner_text()
    assert frame.locator(".chat-usage").count() == 0  # no token accounting for visitors (the embed's default)
    assert frame.locator(".chat-assistant .chat-feedback button[data-rating]").count() == 2
    frame.locator(".chat-feedback-up").click()  # the visitor rates the reply
    frame.locator(".chat-feedback-note", has_text="Thanks").wait_for()
    if os.environ.get("SCREENSHOTS") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(IMAGES / "widget.png"))

    # The rate limit (2 an hour) answers in words.
    _say(frame, "And the inverter?")
    frame.locator(".chat-assistant .chat-feedback >> nth=1").wait_for(timeout=20_000)
    _say(frame, "One more?")
    error = frame.locator(".chat-error").last
    error.wait_for(timeout=10_000)
    assert "Message limit reached (2 per hour)" in error.inner_text()
    if os.environ.get("SCREENSHOTS") == "1":
        page.screenshot(path=str(IMAGES / "widget-limit.png"))
    with tenant_scope(tenant):
        assert list(Feedback.objects.values_list("rating", "source")) == [(1, "widget")]
    _no_credential_in(seen, ticket, visitor)

    # A second visitor (another browser, in Chinese) gets their own, empty conversation.
    other = page_for("zh-CN")
    other.set_default_timeout(30_000)
    other_seen = _watch(other)
    other_frame, other_ticket, other_visitor = _open_chat(other, f"http://127.0.0.1:{port}/zh.html", embed.token)
    assert other_visitor != visitor
    assert other_frame.locator(".chat-msg").count() == 0
    assert "Warranty?" not in other_frame.locator("body").inner_text()
    assert other_frame.locator("#chat-send").inner_text() == "发送"
    _no_credential_in(other_seen, other_ticket, other_visitor)

    # The same snippet on a site that is not allowed: the bubble shows, the frame gets nothing.
    refused = page_for("en-US")
    refused.set_default_timeout(30_000)
    with refused.expect_response(lambda response: f"/embed/{embed.token}/" in response.url) as framed:
        refused_frame = _open_widget(refused, f"http://localhost:{port}/en.html")
    assert framed.value.status == 403  # with an empty body (tests/widget/test_pages.py)
    assert refused_frame.locator("#chat-input").count() == 0


def test_a_member_rates_a_reply_on_the_chat_page(asgi_live_server, tenant, scripted_llm, page_for):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Face the panels south."}})
    embed = make_embed(tenant, scripted_llm.base_url)  # its agent, published; the embed itself is unused here
    user = UserFactory(username="rater")
    user.set_password(PASSWORD)
    user.save()
    MembershipFactory(tenant=tenant, user=user, role=Role.MEMBER)
    page = page_for("en-US")
    log_in(page, asgi_live_server.url, "rater")
    start_conversation(page, asgi_live_server.url, embed.agent.name)
    say(page, "Which way?")
    page.locator(".chat-feedback-down").click()
    page.locator(".chat-feedback-comment").fill("Say why, please.")
    page.locator(".chat-feedback-form button").click()
    page.locator(".chat-feedback-note", has_text="Thanks").wait_for()
    page.wait_for_timeout(300)
    page.reload()  # the buttons are there again on the stored reply
    assert page.locator(".chat-assistant .chat-feedback button[data-rating]").count() == 2
    with tenant_scope(tenant):
        assert list(Feedback.objects.values_list("rating", "comment", "source", "user__username")) == [
            (-1, "Say why, please.", "chat", "rater")
        ]
