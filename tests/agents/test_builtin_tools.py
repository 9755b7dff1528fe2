"""The built-in tools: http_request (allow-list, blocked networks, pinned address, limits), ask_user, deep_think."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ValidationError

from agents.models import ToolHttpAllowedHost
from agents.tools import ToolCallContext, ToolError, get_tool
from agents.tools import http as http_tool
from agents.tools.http import DEFAULT_BLOCKED_NETWORKS, address_blocked, blocked_networks, host_matches
from agents.tools.think import conclusion_of
from llm.models import LLMCall
from tenants.scope import tenant_scope
from tests.llm.factories import ModelProviderFactory
from tests.turns import flush_records

BLOCKED_ADDRESSES = [
    "127.0.0.1",
    "10.0.0.1",
    "172.16.5.4",
    "192.168.0.1",
    "169.254.169.254",
    "0.0.0.0",  # noqa: S104 - an address to refuse, not one to bind
    "::1",
    "::",
    "fe80::1",
    "fe80::1%eth0",
    "fd00::1",
    "::ffff:10.0.0.1",
    "::ffff:0:7f00:1",  # IPv4-translated 127.0.0.1
    "2002:7f00:1::1",  # 6to4 carrying 127.0.0.1
    "::ffff:127.0.0.1",
    "224.0.0.1",
    "100.64.0.1",
    "255.255.255.255",
]
LOOPBACK_ALLOWED = [net for net in DEFAULT_BLOCKED_NETWORKS if net not in ("127.0.0.0/8",)]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:  # keep the test output quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/json":
            self._send(200, json.dumps({"host": self.headers["Host"], "dish": "包子"}).encode())
        elif self.path == "/big":
            self._send(200, b"x" * 5000, "text/plain")
        elif self.path == "/slow":
            time.sleep(1.5)
            self._send(200, b"{}")
        elif self.path == "/redirect-inside":
            self._send(302, b"", Location="/json")
        elif self.path == "/headers":
            seen = {name: self.headers.get(name) for name in ("Authorization", "X-Api-Key", "Accept")}
            self._send(200, json.dumps({name.lower(): value for name, value in seen.items()}).encode())
        elif self.path.startswith("/redirect-to/"):
            self._send(302, b"", Location=self.path.removeprefix("/redirect-to/"))
        elif self.path == "/redirect-outside":
            self._send(302, b"", Location="http://metadata.test/latest/")
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self._send(201, json.dumps({"received": json.loads(self.rfile.read(length))}).encode())


@pytest.fixture
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.handle_error = lambda request, address: None  # the timeout test hangs up on the slow handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake_dns(monkeypatch):
    """Names of the tests resolve to chosen addresses; others go to the real resolver (localhost)."""
    names = {
        "api.test": ["127.0.0.1"],
        "other.test": ["127.0.0.1"],
        "metadata.test": ["169.254.169.254"],
        "intranet.test": ["10.0.0.7"],
        "mixed.test": ["93.184.216.34", "192.168.1.20"],
        "mapped.test": ["::ffff:127.0.0.1"],
        "v6.test": ["::1"],
        "public.test": ["93.184.216.34"],
    }
    real = http_tool.resolve_host
    monkeypatch.setattr(http_tool, "resolve_host", lambda host, port: names.get(host) or real(host, port))
    return names


def _allow(tenant, *hosts):
    with tenant_scope(tenant):
        for host in hosts:
            ToolHttpAllowedHost.objects.create(tenant=tenant, host=host)


async def _request(tenant, **arguments):
    tool = get_tool("http_request")
    arguments = {"method": "GET", **arguments}
    assert tool.validation_errors(arguments) == []
    return await tool.run(arguments, ToolCallContext(tenant=tenant))


def test_host_patterns_and_blocked_addresses():
    assert host_matches("api.example.com", "api.example.com")
    assert host_matches("a.b.example.com", "*.example.com")
    assert not host_matches("example.com", "*.example.com")
    assert not host_matches("badexample.com", "*.example.com")
    assert not host_matches("api.example.com.evil.net", "api.example.com")
    networks = blocked_networks()
    for address in BLOCKED_ADDRESSES:
        assert address_blocked(address, networks), address
    for address in ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]:
        assert not address_blocked(address, networks), address


def test_allowed_host_validation(tenant):
    with tenant_scope(tenant):
        host = ToolHttpAllowedHost(tenant=tenant, host=" *.Example.COM. ")
        host.full_clean()
        assert host.host == "*.example.com"
        for bad in ["https://api.example.com", "api.example.com:8080", "api.example.com/path", "*", "a..b"]:
            with pytest.raises(ValidationError):
                ToolHttpAllowedHost(tenant=tenant, host=bad).full_clean()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost/",
        "http://metadata.test/",
        "http://intranet.test/",
        "http://mixed.test/",
        "http://mapped.test/",
        "http://v6.test/",
        "http://[::1]/",
    ],
)
async def test_private_and_special_addresses_are_refused_even_when_allowed(tenant, fake_dns, url):
    await _allow_async(tenant, "127.0.0.1", "10.0.0.1", "169.254.169.254", "localhost", "*.test", "::1")
    with pytest.raises(ToolError, match="private or reserved"):
        await _request(tenant, url=url)


async def _allow_async(tenant, *hosts):
    from core.db import database_sync_to_async

    await database_sync_to_async(_allow)(tenant, *hosts)


@pytest.mark.django_db(transaction=True)
async def test_hosts_off_the_allow_list_and_other_tenants_lists_are_refused(tenant, other_tenant, fake_dns):
    await _allow_async(other_tenant, "public.test")
    with pytest.raises(ToolError, match="not on this organisation's list"):
        await _request(tenant, url="http://public.test/")
    await _allow_async(tenant, "api.test")
    with pytest.raises(ToolError, match="not on this organisation's list"):
        await _request(tenant, url="http://public.test/")
    with pytest.raises(ToolError, match="Only http"):
        await _request(tenant, url="file:///etc/passwd")


@pytest.mark.django_db(transaction=True)
async def test_success_path_connects_to_the_checked_address(tenant, fake_dns, http_server, settings):
    settings.HTTP_TOOL_BLOCKED_NETWORKS = LOOPBACK_ALLOWED
    await _allow_async(tenant, "api.test")
    # api.test exists only in the test's resolver: the answer proves the request went to the checked address.
    result = await _request(tenant, url=f"http://api.test:{http_server}/json")
    assert result.content["status"] == 200
    assert result.content["body"] == {"host": f"api.test:{http_server}", "dish": "包子"}
    posted = await _request(tenant, method="POST", url=f"http://api.test:{http_server}/echo", json={"a": [1, 2]})
    assert posted.content["status"] == 201
    assert posted.content["body"] == {"received": {"a": [1, 2]}}
    followed = await _request(tenant, url=f"http://api.test:{http_server}/redirect-inside")
    assert followed.content["url"].endswith("/json")
    assert followed.content["body"]["dish"] == "包子"


@pytest.mark.django_db(transaction=True)
async def test_credentials_are_not_passed_to_another_host_on_redirect(tenant, fake_dns, http_server, settings):
    settings.HTTP_TOOL_BLOCKED_NETWORKS = LOOPBACK_ALLOWED
    await _allow_async(tenant, "api.test", "other.test")
    headers = {"Authorization": "Bearer secret", "X-Api-Key": "k-123", "Accept": "application/json"}
    same = await _request(tenant, url=f"http://api.test:{http_server}/redirect-to//headers", headers=headers)
    assert same.content["body"] == {k.lower(): v for k, v in headers.items()}
    elsewhere = f"http://other.test:{http_server}/headers"
    other = await _request(tenant, url=f"http://api.test:{http_server}/redirect-to/{elsewhere}", headers=headers)
    assert other.content["url"] == elsewhere
    # Credentials under any header name stay with the first host; harmless headers follow.
    assert other.content["body"] == {"authorization": None, "x-api-key": None, "accept": "application/json"}


@pytest.mark.django_db(transaction=True)
async def test_a_redirect_to_an_unchecked_host_is_refused(tenant, fake_dns, http_server, settings):
    settings.HTTP_TOOL_BLOCKED_NETWORKS = LOOPBACK_ALLOWED
    await _allow_async(tenant, "api.test")
    with pytest.raises(ToolError, match=r"metadata\.test is not on"):
        await _request(tenant, url=f"http://api.test:{http_server}/redirect-outside")
    await _allow_async(tenant, "metadata.test")
    with pytest.raises(ToolError, match="private or reserved"):
        await _request(tenant, url=f"http://api.test:{http_server}/redirect-outside")


@pytest.mark.django_db(transaction=True)
async def test_size_limit_and_timeout(tenant, fake_dns, http_server, settings):
    settings.HTTP_TOOL_BLOCKED_NETWORKS = LOOPBACK_ALLOWED
    settings.HTTP_TOOL_MAX_BYTES = 1000
    settings.HTTP_TOOL_TIMEOUT = 0.3
    await _allow_async(tenant, "api.test")
    with pytest.raises(ToolError, match="larger than 1000 bytes"):
        await _request(tenant, url=f"http://api.test:{http_server}/big")
    started = time.monotonic()
    with pytest.raises(ToolError, match=r"did not answer within 0\.3 seconds"):
        await _request(tenant, url=f"http://api.test:{http_server}/slow")
    assert time.monotonic() - started < 1.2


async def test_ask_user_signals_the_question(tenant):
    tool = get_tool("ask_user")
    assert tool.validation_errors({}) == ["arguments: 'question' is a required property"]
    result = await tool.run({"question": "几位用餐？"}, ToolCallContext(tenant=tenant))
    assert result.ask_user == "几位用餐？"
    assert result.content == "几位用餐？"


def test_conclusion_is_the_text_after_the_marker():
    assert conclusion_of("step 1\nstep 2\n结论/Conclusion: 42") == "42"
    assert conclusion_of("想一想\n**结论：** 选 B\n因为更便宜") == "选 B\n因为更便宜"
    assert conclusion_of("Conclusion: yes") == "yes"
    assert conclusion_of("no marker at all") == "no marker at all"


@pytest.mark.django_db(transaction=True)
async def test_deep_think_asks_the_reasoning_model_and_returns_the_conclusion(tenant, scripted_llm):
    from core.db import database_sync_to_async

    def make_provider():
        with tenant_scope(tenant):
            return ModelProviderFactory(
                tenant=tenant, base_url=scripted_llm.base_url, is_default=True, reasoning_model="deep-r1"
            )

    await database_sync_to_async(make_provider)()
    scripted_llm.set_rules(
        {
            "when": {"model": "deep-r1", "system_prompt": "结论/Conclusion"},
            "reply": {"text": "Step 1: 3 × 4 = 12.\nStep 2: 12 + 5 = 17.\n结论/Conclusion: 17"},
        },
        {"when": {}, "reply": {"text": "wrong model"}},
    )
    tool = get_tool("deep_think")
    call = ToolCallContext(tenant=tenant, agent_id=None)
    result = await tool.run({"question": "3 × 4 + 5?", "context": "Use integers."}, call)
    assert result.content == "17"
    import asyncio

    (request,) = await asyncio.to_thread(scripted_llm.requests)
    assert request["body"]["model"] == "deep-r1"
    assert "Use integers." in request["body"]["messages"][-1]["content"]

    def purposes():
        with tenant_scope(tenant):
            return list(LLMCall.objects.values_list("purpose", flat=True))

    await flush_records()
    assert await database_sync_to_async(purposes)() == ["extract"]


@pytest.mark.django_db
def test_allow_list_admin_is_per_tenant(login, tenant_admin, tenant, other_tenant):
    from django.urls import reverse

    _allow(other_tenant, "their-api.example.com")
    with tenant_scope(other_tenant):
        theirs = ToolHttpAllowedHost.objects.get()
    client = login(tenant_admin, tenant)
    response = client.post(reverse("admin:agents_toolhttpallowedhost_add"), {"host": "API.Example.com", "note": ""})
    assert response.status_code == 302
    with tenant_scope(tenant):
        assert ToolHttpAllowedHost.objects.get().host == "api.example.com"
    page = client.get(reverse("admin:agents_toolhttpallowedhost_changelist")).content.decode()
    assert "api.example.com" in page and "their-api" not in page
    assert client.get(reverse("admin:agents_toolhttpallowedhost_change", args=[theirs.pk])).status_code in (302, 404)
    response = client.post(reverse("admin:agents_toolhttpallowedhost_add"), {"host": "https://x.com/a", "note": ""})
    assert response.status_code == 200 and "host" in response.context["adminform"].form.errors
