"""Issue 36 in Chromium without an emoji font (the Debian browser of `make browser-deps`): the widget's bubble and the
rating buttons are drawn (inline SVG), not emoji that render as an empty circle or empty squares; they have names in
the page's language; a rating is still pressed after a reload, on the chat page and in the widget; widget visitors
see no token accounting (the embed's default), members on the chat page do; the agent page shows the counts."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tenants.models import Role
from tenants.scope import tenant_scope
from tests.browser import test_widget
from tests.browser.pages import PASSWORD, log_in, say, start_conversation
from tests.factories import MembershipFactory, UserFactory
from tests.widget.helpers import make_embed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The widget test's plain website on a second port (a fixture), its host page and how it opens the chat.
host_site = test_widget.host_site
HOST_PAGE, _open_chat, _say = test_widget.HOST_PAGE, test_widget._open_chat, test_widget._say


def _drawn(locator) -> None:
    """The icon is painted: an SVG with a shape of real size, and no text glyph inside the control."""
    svg = locator.locator("svg")
    assert svg.count() == 1
    box = svg.locator("path").last.bounding_box()
    assert box is not None and box["width"] > 8 and box["height"] > 8, box
    assert locator.inner_text().strip() == ""  # nothing that needs a font


def _member(tenant, username: str):
    user = UserFactory(username=username)
    user.set_password(PASSWORD)
    user.save()
    MembershipFactory(tenant=tenant, user=user, role=Role.MEMBER)
    return user


def _a_reply(server, tenant, scripted_llm, page, username: str):
    """A member `username` logged in on `page`, asking the embed's agent one question: (the agent, the reply)."""
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Face the panels south."}})
    embed = make_embed(tenant, scripted_llm.base_url)
    _member(tenant, username)
    log_in(page, server.url, username)
    start_conversation(page, server.url, embed.agent.name)
    say(page, "Which way?")
    return embed.agent, page.locator(".chat-assistant").last


def test_the_chat_pages_rating_buttons_are_drawn_and_the_rating_stays(asgi_live_server, tenant, scripted_llm, page_for):
    page = page_for("zh-CN")
    agent, reply = _a_reply(asgi_live_server, tenant, scripted_llm, page, "rater")
    assert reply.locator(".chat-usage").count() == 1  # members keep the token line

    up = reply.get_by_role("button", name="回复很好")
    down = reply.get_by_role("button", name="回复不好")
    _drawn(up)
    _drawn(down)
    assert up.get_attribute("aria-pressed") == "false" and down.get_attribute("aria-pressed") == "false"
    down.click()
    reply.locator(".chat-feedback-comment").fill("Say why, please.")
    reply.locator(".chat-feedback-form button").click()
    reply.locator(".chat-feedback-note", has_text="感谢").wait_for()
    assert down.get_attribute("aria-pressed") == "true"

    page.reload()
    reply = page.locator(".chat-assistant").last
    down = reply.get_by_role("button", name="回复不好")
    assert down.get_attribute("aria-pressed") == "true"
    assert reply.get_by_role("button", name="回复很好").get_attribute("aria-pressed") == "false"
    _drawn(down)
    # The pressed button looks pressed: filled, unlike its neighbour.
    fills = reply.locator(".icon-thumb-hand").evaluate_all("nodes => nodes.map(n => getComputedStyle(n).fill)")
    assert fills[0] == "none" and fills[1] != "none", fills
    assert reply.locator(".chat-feedback-comment").input_value() == "Say why, please."

    # Rating again from the reloaded page (the server-rendered buttons are wired too) replaces the rating.
    page.locator("#chat-form[data-ready]").wait_for()
    reply.get_by_role("button", name="回复很好").click()
    reply.locator(".chat-feedback-note", has_text="感谢").wait_for()
    page.reload()
    assert (
        page.locator(".chat-assistant").last.get_by_role("button", name="回复很好").get_attribute("aria-pressed")
        == "true"
    )

    # The agent's page counts it, drawn as icons too.
    page.goto(asgi_live_server.url + reverse("agents:detail", args=[agent.pk]))
    totals = page.locator("#feedback-totals")
    assert totals.locator("[data-feedback=up]").inner_text() == "1"
    assert totals.locator("[data-feedback=down]").inner_text() == "0"
    hand = totals.locator(".icon-thumb-hand").first.bounding_box()
    assert hand is not None and hand["width"] > 8 and hand["height"] > 8, hand
    assert page.locator('#versions tr[data-version="1"] [data-count=up]').inner_text() == "1"


def test_a_comment_sent_right_after_the_rating_is_not_wiped_by_the_ratings_late_answer(
    asgi_live_server, tenant, scripted_llm, page_for
):
    """The rating's request (no comment) held in the network until the comment has been submitted: the page sends
    the comment only after the rating has been answered, so the comment is what the server keeps."""
    page = page_for("en")
    _agent, reply = _a_reply(asgi_live_server, tenant, scripted_llm, page, "late-rater")
    held, sent = [], []

    def hold_the_rating(route) -> None:
        body = route.request.post_data_json or {}
        sent.append("comment" in body)
        if "comment" not in body and not held:
            held.append(route)  # answered below, after the comment was submitted
        else:
            route.continue_()

    page.route("**/feedback/", hold_the_rating)
    reply.get_by_role("button", name="Bad reply").click()
    reply.locator(".chat-feedback-comment").fill("Too vague.")
    reply.locator(".chat-feedback-form button").click()
    page.wait_for_timeout(300)  # time for a second request to leave, if the page sent it at once
    assert sent == [False]  # the comment waits for the rating's answer
    assert reply.locator(".chat-feedback-note").inner_text() == ""  # nothing said while requests are out
    held[0].continue_()
    reply.locator(".chat-feedback-note", has_text="Thank").wait_for()
    assert sent == [False, True]

    page.reload()
    reply = page.locator(".chat-assistant").last
    assert reply.get_by_role("button", name="Bad reply").get_attribute("aria-pressed") == "true"
    assert reply.locator(".chat-feedback-comment").input_value() == "Too vague."


def test_the_widget_bubble_is_drawn_visitors_see_no_tokens_and_their_rating_stays(
    asgi_live_server, tenant, scripted_llm, host_site, page_for
):
    folder, port = host_site
    scripted_llm.set_rules({"when": {}, "reply": {"text": "Our panels carry a 25-year warranty."}})
    embed = make_embed(tenant, scripted_llm.base_url)
    embed.allowed_origins = f"http://127.0.0.1:{port}"
    with tenant_scope(tenant):
        embed.save()
    html = HOST_PAGE.format(lang="zh-CN", platform=asgi_live_server.url, token=embed.token)
    (folder / "zh.html").write_text(html, encoding="utf-8")
    url = f"http://127.0.0.1:{port}/zh.html"

    page = page_for("zh-CN")
    page.set_default_timeout(30_000)
    page.goto(url)
    bubble = page.get_by_role("button", name="在线助手")
    assert bubble.get_attribute("title") == "在线助手"
    _drawn(bubble)

    frame, _ticket, _visitor = _open_chat(page, url, embed.token)
    _say(frame, "保修多久？")
    reply = frame.locator(".chat-assistant").last
    reply.locator(".chat-feedback").wait_for(timeout=20_000)  # the reply is done: its rating buttons are there
    assert "25-year warranty" in reply.locator(".chat-body").inner_text()
    assert frame.locator(".chat-usage").count() == 0  # no token accounting for visitors (the embed's default)
    assert "Token" not in frame.locator("body").inner_text()
    up = reply.get_by_role("button", name="回复很好")
    _drawn(up)
    up.click()
    reply.locator(".chat-feedback-note", has_text="感谢").wait_for()

    # The visitor comes back: the stored rating is pressed, still no token line.
    page.reload()
    frame, _ticket, _visitor = _open_chat(page, url, embed.token)
    reply = frame.locator(".chat-assistant").last
    assert reply.get_by_role("button", name="回复很好").get_attribute("aria-pressed") == "true"
    assert reply.get_by_role("button", name="回复不好").get_attribute("aria-pressed") == "false"
    assert frame.locator(".chat-usage").count() == 0
