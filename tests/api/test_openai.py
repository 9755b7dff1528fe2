"""The OpenAI-compatible endpoint with real clients (the openai SDK, sync and async, and LangChain's ChatOpenAI)
against Daphne serving the project, with the scripted model behind the agents."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import httpx
import openai
import pytest
from django.core.cache import cache

from agents.services import conversation_start
from api.models import KeyScope
from engine.places import stream_slot_take
from memory.models import Conversation, Message
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(asgi_live_server):
    return asgi_live_server


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)


def _stored(conversation_id: int) -> list[tuple[str, str]]:
    with all_tenants(reason="test reads what was stored"):
        return list(
            Message.objects.filter(conversation_id=conversation_id).order_by("id").values_list("role", "content")
        )


def test_models_lists_exactly_the_keys_published_agents(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    models = _client(server, secret).models.list()
    assert sorted(model.id for model in models.data) == sorted([published.solar.slug, published.pv.slug])
    assert published.pv.slug == "光伏测算"  # a Chinese name keeps its characters

    _key, narrow = make_key(tenant_admin, agents=[published.pv])
    assert [model.id for model in _client(server, narrow).models.list().data] == ["光伏测算"]


def test_completion_answers_from_the_whole_history_and_stores_it(
    server, published, tenant_admin, make_key, scripted_llm
):
    _key, secret = make_key(tenant_admin)
    completion = _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "My roof faces south."},
            {"role": "assistant", "content": "Good for panels."},
            {"role": "user", "content": "How many panels?"},
        ],
    )
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "You said: How many panels?"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.prompt_tokens > 0 and completion.usage.completion_tokens > 0
    sent = scripted_llm.requests()[-1]["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]  # one system message: the agent's
    assert sent[0]["content"].startswith("You advise.") and sent[1]["content"] == "My roof faces south."
    conversation_id = completion.model_extra["conversation_id"]
    assert _stored(conversation_id) == [
        ("user", "My roof faces south."),
        ("assistant", "Good for panels."),
        ("user", "How many panels?"),
        ("assistant", "You said: How many panels?"),
    ]


def test_streaming_with_usage_ends_with_a_usage_chunk(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)
    stream = _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": "hello there"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "You said: hello there"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert len({chunk.id for chunk in chunks}) == 1


def test_async_client_streams_without_usage(server, published, tenant_admin, make_key):
    _key, secret = make_key(tenant_admin)

    async def run() -> list:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)
        stream = await client.chat.completions.create(
            model=published.pv.slug, messages=[{"role": "user", "content": "你好"}], stream=True
        )
        chunks = [chunk async for chunk in stream]
        await client.close()
        return chunks

    chunks = asyncio.run(run())
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "You said: 你好"
    assert all(chunk.choices for chunk in chunks)  # no usage chunk when it was not asked for


def test_a_conversation_id_continues_the_stored_conversation(server, published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    first = client.chat.completions.create(model=published.solar.slug, messages=[{"role": "user", "content": "one"}])
    conversation_id = first.model_extra["conversation_id"]
    second = client.chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": "ignored history"}, {"role": "user", "content": "two"}],
        extra_headers={"X-Conversation-Id": str(conversation_id)},
    )
    assert second.model_extra["conversation_id"] == conversation_id
    assert [content for _role, content in _stored(conversation_id)] == ["one", "You said: one", "two", "You said: two"]
    sent = scripted_llm.requests()[-1]["body"]["messages"]
    assert [m["content"] for m in sent[1:]] == ["one", "You said: one", "two"]


def test_an_idempotency_key_runs_the_turn_once(server, published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    first = client.chat.completions.create(model=published.solar.slug, messages=[{"role": "user", "content": "x"}])
    conversation_id = first.model_extra["conversation_id"]
    options = {"extra_headers": {"X-Conversation-Id": str(conversation_id), "Idempotency-Key": "req-1"}}
    messages = [{"role": "user", "content": "again"}]
    a = client.chat.completions.create(model=published.solar.slug, messages=messages, **options)
    b = client.chat.completions.create(model=published.solar.slug, messages=messages, **options)
    assert a.id == b.id and a.choices[0].message.content == b.choices[0].message.content == "You said: again"
    assert len(scripted_llm.requests()) == 2  # "x" and "again": the resend ran nothing


def test_errors_come_in_openais_shape(server, published, tenant_admin, member, make_key):
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    user_says = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such-agent", messages=user_says)
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):  # a draft is not offered
        client.chat.completions.create(model=published.draft.slug, messages=user_says)
    with pytest.raises(openai.NotFoundError):  # another tenant's agent
        client.chat.completions.create(model=published.foreign.slug, messages=user_says)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=published.solar.slug, messages=[{"role": "assistant", "content": "x"}])
    assert bad.value.body["param"] == "messages[0]"
    with pytest.raises(openai.AuthenticationError) as wrong:
        _client(server, secret[:-3] + "abc").models.list(extra_headers={"Accept-Language": "en"})
    assert wrong.value.code == "invalid_api_key" and wrong.value.body["message"] == "This API key is not valid."
    with pytest.raises(openai.AuthenticationError) as chinese:
        _client(server, secret[:-3] + "abc").models.list(extra_headers={"Accept-Language": "zh-CN"})
    assert chinese.value.body["message"] == "此 API 密钥无效。"
    _key, read_only = make_key(tenant_admin, scopes=[KeyScope.READ])
    with pytest.raises(openai.PermissionDeniedError) as scope:
        _client(server, read_only).chat.completions.create(model=published.solar.slug, messages=user_says)
    assert scope.value.code == "insufficient_scope"


def test_another_members_or_tenants_conversation_is_not_found(
    server, published, tenant, other_tenant, member, other_tenant_admin, make_key
):
    _key, own = make_key(member)
    first = _client(server, own).chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "mine"}]
    )
    conversation_id = first.model_extra["conversation_id"]
    other_member = MembershipFactory(tenant=tenant).user
    _key, colleague = make_key(other_member)
    _key, foreign = make_key(other_tenant_admin, owner=other_tenant)
    for secret, model in ((colleague, published.solar.slug), (foreign, published.foreign.slug)):
        with pytest.raises(openai.NotFoundError) as refused:
            _client(server, secret).chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "peek"}],
                metadata={"conversation_id": str(conversation_id)},
            )
        assert refused.value.code in ("conversation_not_found", "model_not_found")
    assert [content for _role, content in _stored(conversation_id)] == ["mine", "You said: mine"]


def test_revoked_expired_and_orphaned_keys_are_refused(server, published, tenant, tenant_admin, member, make_key):
    from django.utils import timezone

    from api.keys import key_revoke
    from tenants.models import Membership

    key, revoked = make_key(tenant_admin)
    with tenant_scope(tenant):
        key_revoke(key=key)
    key, expired = make_key(tenant_admin)
    with tenant_scope(tenant):
        type(key).objects.filter(pk=key.pk).update(expires_at=timezone.now())
    _key, orphaned = make_key(member)
    Membership.objects.filter(user=member, tenant=tenant).delete()
    for secret, code in ((revoked, "revoked_api_key"), (expired, "expired_api_key"), (orphaned, "member_left")):
        with pytest.raises(openai.AuthenticationError) as refused:
            _client(server, secret).models.list()
        assert refused.value.code == code


def test_a_key_over_its_rate_gets_429_with_retry_after(server, published, tenant_admin, make_key, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api_key": "2/min"}}
    from rest_framework.settings import api_settings
    from rest_framework.throttling import SimpleRateThrottle

    SimpleRateThrottle.THROTTLE_RATES = api_settings.DEFAULT_THROTTLE_RATES
    try:
        key, secret = make_key(tenant_admin)
        cache.delete(f"throttle_api_key_{key.prefix}")
        client = _client(server, secret)
        client.models.list()
        client.models.list()
        request = urllib.request.Request(  # noqa: S310 - the test server's http URL
            f"{server.url}/v1/models", headers={"Authorization": f"Bearer {secret}"}
        )
        with pytest.raises(urllib.error.HTTPError) as limited:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310
        assert limited.value.code == 429
        assert 1 <= int(limited.value.headers["Retry-After"]) <= 60
        assert json.loads(limited.value.read())["error"]["code"] == "rate_limit_exceeded"
    finally:
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK}
        SimpleRateThrottle.THROTTLE_RATES = {"api_key": "600/min"}


def test_langchain_chat_openai_invokes_and_streams(server, published, tenant_admin, make_key):
    from langchain_openai import ChatOpenAI

    _key, secret = make_key(tenant_admin)
    chat = ChatOpenAI(model=published.solar.slug, base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
    assert chat.invoke("What is a kWp?").content == "You said: What is a kWp?"
    assert "".join(chunk.content for chunk in chat.stream("And kWh?")) == "You said: And kWh?"


def test_a_client_that_goes_away_stops_the_turn_and_keeps_the_message(server, published, tenant_admin, make_key,
                                                                        scripted_llm):  # fmt: skip
    scripted_llm.set_rules(
        {"name": "slow", "when": {}, "reply": {"text": " ".join(["word"] * 200)}}, defaults={"delay": 0.05}
    )
    _key, secret = make_key(tenant_admin)
    stream = _client(server, secret).chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "long please"}], stream=True
    )
    for received, _chunk in enumerate(stream, start=1):
        if received == 5:
            break
    stream.close()
    with all_tenants(reason="test reads what was stored"):
        conversation = Conversation.objects.order_by("-id").first()
    deadline = asyncio.run(_wait_for_reply(conversation.pk))
    assert deadline, "the stopped turn stored nothing"
    rows = _stored(conversation.pk)
    assert rows[0] == ("user", "long please")
    with all_tenants(reason="test reads what was stored"):
        reply = Message.objects.filter(conversation=conversation, role="assistant").get()
    assert reply.status != "complete" and len(reply.content) < len(" ".join(["word"] * 200))


async def _wait_for_reply(conversation_id: int) -> bool:
    from core.db import database_sync_to_async

    for _ in range(100):
        if len(await database_sync_to_async(_stored)(conversation_id)) == 2:
            return True
        await asyncio.sleep(0.1)
    return False


@pytest.mark.parametrize("escape", ["\\u0000", "\\ud800"], ids=["nul", "surrogate"])
def test_l2_a_nul_byte_or_lone_surrogate_is_a_400_and_nothing_is_stored(
    server, published, tenant_admin, make_key, escape
):
    _key, secret = make_key(tenant_admin)
    with all_tenants(reason="test counts what was stored"):
        before = (Conversation.objects.count(), Message.objects.count())
    # Sent as JSON's escape (the SDK cannot encode a lone surrogate); the bad text sits in the history, so a stored
    # conversation must not be left with half of it.
    messages = [
        {"role": "user", "content": "fine"},
        {"role": "assistant", "content": "bad <here>"},
        {"role": "user", "content": "and now?"},
    ]
    body = json.dumps({"model": published.solar.slug, "messages": messages}).replace("<here>", escape)
    for language, words in (("en", "cannot be stored"), ("zh-hans", "无法保存")):
        response = httpx.post(
            f"{server.url}/v1/chat/completions", content=body.encode(), timeout=20,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json",
                     "Accept-Language": language},
        )  # fmt: skip
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_characters" and error["param"] == "messages[1].content"
        assert words in error["message"] and error["type"] == "invalid_request_error"
    if escape == "\\u0000":  # the SDK sends a NUL as it is, and gets the same refusal, streamed or not
        with pytest.raises(openai.BadRequestError) as refused:
            _client(server, secret).chat.completions.create(
                model=published.solar.slug, messages=[{"role": "user", "content": "nul\x00byte"}], stream=True
            )
        assert refused.value.code == "invalid_characters"
    with all_tenants(reason="test counts what was stored"):
        assert (Conversation.objects.count(), Message.objects.count()) == before


def test_l6_a_tenants_streams_are_limited_across_its_keys_and_processes(
    server, published, tenant, other_tenant, tenant_admin, other_tenant_admin, make_key, settings
):
    settings.API_TENANT_MAX_STREAMS = 2
    cache.clear()
    # Two streams of the tenant open elsewhere (another key, another process: the places are in the shared cache).
    held = [stream_slot_take(tenant.pk, 2), stream_slot_take(tenant.pk, 2)]
    _key, secret = make_key(tenant_admin)
    client = _client(server, secret)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(
            model=published.solar.slug, messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers={"Accept-Language": "en"},
        )  # fmt: skip
    assert refused.value.code == "too_many_streams" and refused.value.body["type"] == "rate_limit_error"
    assert "2 replies streaming" in refused.value.body["message"] and refused.value.response.headers["Retry-After"]
    with tenant_scope(tenant):
        conversation_id = conversation_start(agent=published.solar, user=tenant_admin).pk
    rest = httpx.post(
        f"{server.url}/api/v1/conversations/{conversation_id}/messages/stream/", json={"content": "hi"}, timeout=20,
        headers={"Authorization": f"Bearer {secret}", "Accept-Language": "zh-hans"},
    )  # fmt: skip
    assert rest.status_code == 429 and rest.json()["error"]["code"] == "too_many_streams"
    assert _stored(conversation_id) == []  # refused before anything was stored
    # Not streamed: not counted. Another tenant: its own places.
    plain = client.chat.completions.create(model=published.solar.slug, messages=[{"role": "user", "content": "hi"}])
    assert plain.choices[0].message.content == "You said: hi"
    _key, theirs = make_key(other_tenant_admin, owner=other_tenant)
    foreign = _client(server, theirs).chat.completions.create(
        model=published.foreign.slug, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in foreign if c.choices) == "You said: hi"
    # One place freed: the stream runs, and its place is free again once it has ended.
    held.pop().release()
    stream = client.chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": "again"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "You said: again"
    keys = [f"api-streams:{tenant.pk}:{n}" for n in range(2)]
    for _ in range(600):  # the server frees the place just after the client has read the last chunk (30 s under load)
        if len(cache.get_many(keys)) == 1:
            break
        time.sleep(0.05)
    assert len(cache.get_many(keys)) == 1  # only the one still held here
    held.pop().release()
    assert cache.get_many(keys) == {}
