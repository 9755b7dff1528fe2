"""A tenant admin cannot send the tenant's model-provider key to the platform's own network: a private or loopback
base URL is refused when saved and when called, unless the platform operator allows it; a changed base URL drops
the stored key unless a key is entered with it. A host name that does not resolve is refused too, and a call connects
to the address it checked, not to what the name resolves to a moment later (L7: DNS rebinding)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx2
import pytest
from django.urls import reverse

from core import netguard
from llm.client import complete_chat
from llm.errors import HOST_UNRESOLVED, PRIVATE_ADDRESS, LLMError, message_for
from llm.messages import ChatMessage
from llm.models import ModelProvider
from llm.options import ChatRequest
from llm.transports import Connection, OpenAICompatibleTransport, sse_data
from tenants.scope import tenant_scope
from tests.factories import refreshed
from tests.llm.factories import ModelProviderFactory
from tests.llm.test_admin import NEW_KEY, provider_form

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english_pages(client):
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"  # the site's default is zh-hans


LOOPBACK_URLS = ["http://127.0.0.1:8081/v1", "http://[::1]:8081/v1", "http://169.254.169.254/v1",
                 "http://[::ffff:0:7f00:1]/v1", "http://localhost:11434/v1"]  # fmt: skip


@pytest.fixture(autouse=True)
def _guard_on(settings):
    settings.LLM_ALLOW_PRIVATE_BASE_URLS = False


# Tests have no network: the internet's names the forms use answer from here; addresses and localhost as usual.
PUBLIC_NAMES = {"api.deepseek.com": ["93.184.215.14"], "api.example.com": ["93.184.215.15"]}


@pytest.fixture(autouse=True)
def _dns(monkeypatch):
    real = netguard.resolve_host

    def resolve(host: str, port: int) -> list[str]:
        if host in PUBLIC_NAMES:
            return PUBLIC_NAMES[host]
        return real(host, port)

    monkeypatch.setattr(netguard, "resolve_host", resolve)


@pytest.mark.parametrize("url", LOOPBACK_URLS)
def test_a_tenant_admin_cannot_point_a_provider_at_a_private_address(tenant, tenant_admin, login, url):
    response = login(tenant_admin, tenant).post(reverse("admin:llm_modelprovider_add"), provider_form(base_url=url))
    assert response.status_code == 200
    assert "private, loopback or link-local" in str(response.context["adminform"].form.errors["base_url"])
    with tenant_scope(tenant):
        assert not ModelProvider.objects.exists()


def test_changing_the_url_drops_the_key_unless_it_is_entered_again(tenant, tenant_admin, login):
    client = login(tenant_admin, tenant)
    assert client.post(reverse("admin:llm_modelprovider_add"), provider_form()).status_code == 302
    with tenant_scope(tenant):
        provider = ModelProvider.objects.get()
    url = reverse("admin:llm_modelprovider_change", args=[provider.pk])
    moved = client.post(url, provider_form(base_url="https://api.example.com/v1", api_key=""), follow=True)
    assert "the stored API key was removed" in moved.content.decode()
    refreshed(provider)
    assert not provider.has_api_key
    client.post(url, provider_form(base_url="https://api.example.com/v1", api_key=NEW_KEY))
    client.post(url, provider_form(base_url="https://api.example.com/v1", api_key="", name="Renamed"))
    refreshed(provider)
    assert provider.name == "Renamed" and provider.api_key() == NEW_KEY  # same URL: the key stays


def test_only_the_platform_operator_allows_a_private_server(tenant, tenant_admin, superuser, login):
    form = provider_form(base_url="http://127.0.0.1:11434/v1", private_network_allowed="on")
    refused = login(tenant_admin, tenant).post(reverse("admin:llm_modelprovider_add"), form)
    assert refused.status_code == 200  # the field is read-only for a tenant admin: ignored, the URL refused
    operator = login(superuser, tenant).post(reverse("admin:llm_modelprovider_add"), {**form, "tenant": tenant.pk})
    assert operator.status_code == 302
    with tenant_scope(tenant):
        assert ModelProvider.objects.get().private_network_allowed


@pytest.mark.django_db(transaction=True)
def test_a_private_url_is_refused_when_called_too(tenant, scripted_llm, settings):
    """A provider saved before the guard, or whose name now resolves inside: the call is refused, not sent."""
    with tenant_scope(tenant):
        provider = ModelProviderFactory(tenant=tenant, base_url=scripted_llm.base_url, api_key="sk-secret")
    hello = [ChatMessage.user("hi")]
    with pytest.raises(LLMError) as refused:
        asyncio.run(complete_chat(ChatRequest(messages=hello), tenant=tenant, provider=provider))
    assert refused.value.code == PRIVATE_ADDRESS and "platform operator" in refused.value.message
    assert scripted_llm.requests() == []
    with tenant_scope(tenant):
        ModelProvider.objects.filter(pk=provider.pk).update(private_network_allowed=True)
        refreshed(provider)
    asyncio.run(complete_chat(ChatRequest(messages=hello), tenant=tenant, provider=provider))
    assert len(scripted_llm.requests()) == 1


def test_l7_a_host_that_does_not_resolve_is_refused_when_saved(tenant, tenant_admin, login):
    form = provider_form(base_url="https://models.no-such-host.invalid/v1")
    response = login(tenant_admin, tenant).post(reverse("admin:llm_modelprovider_add"), form)
    assert response.status_code == 200
    assert "models.no-such-host.invalid does not resolve" in str(response.context["adminform"].form.errors["base_url"])
    with tenant_scope(tenant):
        assert not ModelProvider.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_l7_a_host_that_does_not_resolve_is_refused_when_called(tenant):
    with tenant_scope(tenant):
        provider = ModelProviderFactory(tenant=tenant, base_url="https://models.no-such-host.invalid/v1")
    with pytest.raises(LLMError) as refused:
        asyncio.run(complete_chat(ChatRequest(messages=[ChatMessage.user("hi")]), tenant=tenant, provider=provider))
    assert refused.value.code == HOST_UNRESOLVED and "does not resolve" in refused.value.message
    assert "无法解析" in message_for(HOST_UNRESOLVED, "zh-hans")


def test_l7_the_call_connects_to_the_address_it_checked(scripted_llm):
    """The name answers a checked address first and a private one on every later lookup (DNS rebinding): the call
    goes to the first, a real connection to the scripted server on 127.0.0.1 (which this test's guard lets through)
    with the name in its Host header; the name itself resolves nowhere else, so only the pinned address reaches it."""
    answers: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        answers.append(host)
        return ["127.0.0.1"] if len(answers) == 1 else ["10.1.2.3"]

    transport = OpenAICompatibleTransport(resolver=rebinding, blocked=netguard.networks(["10.0.0.0/8"]))
    name = "models.rebinding.invalid"
    connection = Connection(kind="openai", base_url=f"http://{name}:{scripted_llm.port}/v1", api_key="sk-test")
    params = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}

    async def reply() -> str:
        return "".join(
            [c.choices[0].delta.content or "" async for c in transport.stream(connection, params) if c.choices]
        )

    assert asyncio.run(reply()) == "You said: hi"
    assert answers == [name]  # resolved once, when checked
    (request,) = scripted_llm.requests()
    assert request["host"] == f"{name}:{scripted_llm.port}"
    # A minute on, the name is checked again: now it is private, and the call is refused instead of sent.
    transport.pins[name] = (transport.pins[name][0], time.monotonic() - 3600)
    with pytest.raises(LLMError) as refused:
        asyncio.run(reply())
    assert refused.value.code == PRIVATE_ADDRESS and len(scripted_llm.requests()) == 1


def test_consecutive_calls_reuse_one_connection(scripted_llm):
    """A streamed reply is read to the end of its body after `[DONE]`, so its connection goes back to the pool: the
    next call is sent on it (each call used to open a new connection, a TLS handshake on a real provider)."""
    transport = OpenAICompatibleTransport()
    connection = Connection(kind="openai", base_url=scripted_llm.base_url, private_allowed=True)
    params = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}

    async def replies() -> list[str]:
        return [
            "".join([c.choices[0].delta.content or "" async for c in transport.stream(connection, params) if c.choices])
            for _ in range(3)
        ]

    assert asyncio.run(replies()) == ["You said: hi"] * 3
    ports = {request["client_port"] for request in scripted_llm.requests()}
    assert len(ports) == 1 and None not in ports


def test_what_follows_done_never_fails_or_holds_up_the_reply():
    """The read after `[DONE]` is bounded: a body that breaks there, or never ends, still gives the whole reply."""

    async def lines(after_done: str) -> AsyncIterator[bytes]:
        yield b'data: {"n": 1}\n\ndata: [DONE]\n\n'
        if after_done == "breaks":
            raise httpx2.ReadError("connection reset")
        await asyncio.sleep(60)

    async def read(after_done: str) -> tuple[list[str], float]:
        started = time.monotonic()
        return [payload async for payload in sse_data(lines(after_done))], time.monotonic() - started

    for after_done in ("breaks", "hangs"):
        payloads, seconds = asyncio.run(read(after_done))
        assert payloads == [b'{"n": 1}'] and seconds < 5


def test_events_are_read_from_the_body_bytes_however_they_are_cut():
    """The body's bytes give the same events wherever its chunks end (inside a line, between a CR and its LF), with
    LF, CRLF or CR line ends, multi-line data joined, other fields and comments skipped, nothing after [DONE]."""
    body = (
        b': a comment\r\nevent: x\r\ndata: {"n": 1}\r\n\r\n'
        b'data: {"a":\r\ndata:2}\r\rid: 7\ndata: \xe4\xbd\xa0\n\n'
        b"data: [DONE]\n\ndata: after\n\n"
    )

    async def chunks(size: int) -> AsyncIterator[bytes]:
        for start in range(0, len(body), size):
            yield body[start : start + size]

    async def read(size: int) -> list[bytes]:
        return [payload async for payload in sse_data(chunks(size))]

    expected = [b'{"n": 1}', b'{"a":\n2}', "你".encode()]
    for size in (1, 2, 3, 5, 7, len(body)):
        assert asyncio.run(read(size)) == expected, size

    async def unended() -> AsyncIterator[bytes]:
        yield b"data: 1\n\ndata: 2"  # the body ends inside the last event: it is still given

    async def read_unended() -> list[bytes]:
        return [payload async for payload in sse_data(unended())]

    assert asyncio.run(read_unended()) == [b"1", b"2"]
