"""Sending a message over the REST API with its reply streamed as server-sent events carrying the chat frames,
through Daphne, with a key and with the browser session (CSRF checked)."""

from __future__ import annotations

import json

import httpx
import pytest

from agents.services import conversation_start
from memory.models import Message
from tenants.scope import tenant_scope
from tests.websockets import session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def _events(response: httpx.Response) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def test_a_key_streams_the_turns_frames(asgi_live_server, published, tenant, member, make_key):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=member)
    _key, secret = make_key(member)
    url = f"{asgi_live_server.url}/api/v1/conversations/{conversation.pk}/messages/stream/"
    body = {"content": "streams?", "client_id": "s-1"}
    with httpx.stream("POST", url, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=20) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
    kinds = [kind for kind, _data in events]
    assert kinds[0] == "user_message" and kinds[-1] == "done" and "delta" in kinds
    assert "".join(data["content"] for kind, data in events if kind == "delta") == "You said: streams?"
    assert events[-1][1]["status"] == "complete" and events[0][1]["seq"] == 1
    again = httpx.post(url, json=body, headers={"Authorization": f"Bearer {secret}"}, timeout=20)
    assert [k for k, _d in _events(again)][-1] == "done"  # a resend replays, nothing runs twice
    with tenant_scope(tenant):
        assert Message.objects.filter(conversation=conversation).count() == 2


def test_a_session_needs_its_csrf_token(asgi_live_server, published, tenant, member):
    with tenant_scope(tenant):
        conversation = conversation_start(agent=published.solar, user=member)
    cookie = session_cookie(member, tenant).decode()
    url = f"{asgi_live_server.url}/api/v1/conversations/{conversation.pk}/messages/stream/"
    refused = httpx.post(url, json={"content": "hi"}, headers={"Cookie": cookie}, timeout=20)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    token = "a" * 32
    headers = {"Cookie": f"{cookie}; csrftoken={token}", "X-CSRFToken": token, "Referer": asgi_live_server.url,
               "Origin": asgi_live_server.url}  # fmt: skip
    with httpx.stream("POST", url, json={"content": "hi"}, headers=headers, timeout=20) as response:
        assert response.status_code == 200, response.read()
        assert _events(response)[-1][0] == "done"


def test_another_members_conversation_is_not_found(asgi_live_server, published, tenant, member, tenant_admin,
                                                   make_key):  # fmt: skip
    with tenant_scope(tenant):
        theirs = conversation_start(agent=published.solar, user=tenant_admin)
    _key, secret = make_key(member)
    url = f"{asgi_live_server.url}/api/v1/conversations/{theirs.pk}/messages/stream/"
    response = httpx.post(url, json={"content": "peek"}, headers={"Authorization": f"Bearer {secret}"}, timeout=20)
    assert response.status_code == 404 and response.json()["error"]["code"] == "conversation_not_found"
