"""An API client's max_tokens within the agent's longest reply, with the real openai SDK against Daphne serving the
project and the scripted model behind the agents; the REST API reads and writes the setting in its own tenant only."""

from __future__ import annotations

import openai
import pytest
from django.test import Client

from agents.models import MAX_REPLY_TOKENS
from agents.services import agent_publish, agent_update
from api.models import KeyScope
from llm import tokens
from tenants.scope import all_tenants, tenant_scope

CAP = 8
TALK = [{"role": "user", "content": "talk"}]


@pytest.fixture
def capped(published, tenant):
    """The solar advisor with a longest reply of CAP tokens, published."""
    with tenant_scope(tenant):
        agent_update(agent=published.solar, max_reply_tokens=CAP)
        agent_publish(agent=published.solar, user=None)
    return published.solar


@pytest.fixture
def long_replies(asgi_live_server, tenant_admin, make_key, scripted_llm) -> openai.OpenAI:
    """The openai SDK on the live server with the tenant admin's key; the scripted model writes 60 tokens."""
    scripted_llm.set_rules({"name": "long", "when": {}, "reply": {"text_tokens": 60}})
    _key, secret = make_key(tenant_admin)
    return _client(asgi_live_server, secret)


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)


def _words(text: str) -> int:
    return tokens.count_text(text, "gpt-4")


@pytest.mark.django_db(transaction=True)
def test_a_clients_max_tokens_is_capped_by_the_agent_and_a_smaller_one_kept(capped, long_replies, scripted_llm):
    client = long_replies

    above = client.chat.completions.create(model=capped.slug, messages=TALK, max_tokens=50)
    assert scripted_llm.requests()[-1]["body"]["max_tokens"] == CAP
    assert above.choices[0].finish_reason == "length" and _words(above.choices[0].message.content) == CAP

    below = client.chat.completions.create(model=capped.slug, messages=TALK, max_completion_tokens=3)
    assert scripted_llm.requests()[-1]["body"]["max_tokens"] == 3
    assert below.choices[0].finish_reason == "length" and _words(below.choices[0].message.content) == 3

    unasked = client.chat.completions.create(model=capped.slug, messages=TALK, stream=True)
    chunks = [chunk for chunk in unasked if chunk.choices]
    assert scripted_llm.requests()[-1]["body"]["max_tokens"] == CAP
    assert _words("".join(c.choices[0].delta.content or "" for c in chunks)) == CAP
    assert chunks[-1].choices[0].finish_reason == "length"

    scripted_llm.set_rules({"name": "short", "when": {}, "reply": {"text": "Fine."}})
    short = client.chat.completions.create(model=capped.slug, messages=TALK, max_tokens=50)
    assert short.choices[0].finish_reason == "stop" and short.choices[0].message.content == "Fine."


@pytest.mark.django_db(transaction=True)
def test_without_a_cap_the_clients_value_is_sent_as_before(published, long_replies, scripted_llm):
    client = long_replies
    asked = client.chat.completions.create(model=published.solar.slug, messages=TALK, max_tokens=50)
    assert scripted_llm.requests()[-1]["body"]["max_tokens"] == 50
    assert asked.choices[0].finish_reason == "length" and _words(asked.choices[0].message.content) == 50
    unasked = client.chat.completions.create(model=published.solar.slug, messages=TALK)
    assert "max_tokens" not in scripted_llm.requests()[-1]["body"]
    assert unasked.choices[0].finish_reason == "stop" and _words(unasked.choices[0].message.content) == 60


# --- the REST API -------------------------------------------------------------------------------------------------


def _api(secret: str, language: str = "en") -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_ACCEPT_LANGUAGE=language)


@pytest.mark.django_db
def test_the_rest_api_reads_writes_and_checks_the_cap(published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    client = _api(secret)
    url = f"/api/v1/agents/{published.solar.pk}/"
    assert client.get(url).json()["max_reply_tokens"] is None
    changed = client.patch(url, {"max_reply_tokens": 300}, "application/json")
    assert changed.status_code == 200 and changed.json()["max_reply_tokens"] == 300
    for value, message in (
        (0, "Enter a whole number of tokens above 0, or leave the field empty for no limit."),
        (MAX_REPLY_TOKENS + 1, f"The longest reply may be at most {MAX_REPLY_TOKENS} tokens."),
    ):
        refused = client.patch(url, {"max_reply_tokens": value}, "application/json")
        assert refused.status_code == 400
        assert refused.json()["error"]["fields"]["max_reply_tokens"] == [message]
    chinese = _api(secret, "zh-hans").patch(url, {"max_reply_tokens": 0}, "application/json")
    assert chinese.json()["error"]["fields"]["max_reply_tokens"] == ["请输入大于 0 的整数 Token 数，或留空表示不限制。"]
    cleared = client.patch(url, {"max_reply_tokens": None}, "application/json")
    assert cleared.status_code == 200 and cleared.json()["max_reply_tokens"] is None


@pytest.mark.django_db
def test_the_rest_api_cannot_see_or_set_another_tenants_cap(published, tenant_admin, make_key, other_tenant):
    with tenant_scope(other_tenant):
        agent_update(agent=published.foreign, max_reply_tokens=4321)
    _key, secret = make_key(tenant_admin, scopes=list(KeyScope.values))
    client = _api(secret)
    url = f"/api/v1/agents/{published.foreign.pk}/"
    assert client.get(url).status_code == 404
    assert client.patch(url, {"max_reply_tokens": 5}, "application/json").status_code == 404
    listed = {agent["id"] for agent in client.get("/api/v1/agents/").json()["results"]}
    assert published.solar.pk in listed and published.foreign.pk not in listed
    with all_tenants(reason="test: the other tenant's agent is untouched"):
        published.foreign.refresh_from_db()
    assert published.foreign.max_reply_tokens == 4321
