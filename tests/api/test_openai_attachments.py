"""Files through the OpenAI-compatible endpoint (issue 37), with real clients against Daphne and the scripted model:
the openai SDK sending an image as a data URL and as an http URL (a local server, reached through the network
guard where tests allow loopback), and a PDF `file` part; LangChain's HumanMessage with an image block; bad files
and bad parts refused in OpenAI's error shape naming the part, nothing stored."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI

from agents.services import agent_create, agent_publish
from core.netguard import DEFAULT_BLOCKED_NETWORKS
from memory.models import Attachment
from tenants.scope import all_tenants, tenant_scope
from tests.api.attachment_files import menu_pdf, menu_png, pixel_bomb_png, renamed_executable

pytestmark = pytest.mark.django_db(transaction=True)

LOOPBACK_ALLOWED = [net for net in DEFAULT_BLOCKED_NETWORKS if net != "127.0.0.0/8"]


@pytest.fixture(autouse=True)
def _storage(settings, tmp_path):
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")


@pytest.fixture
def server(asgi_live_server):
    return asgi_live_server


@pytest.fixture
def vision_agent(published, tenant):
    """An agent on a model of a vision family (gpt-4o) behind the scripted server."""
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Menu reader", system_prompt="You read menus.", model="gpt-4o")
        agent_publish(agent=agent, user=None)
    return agent


@pytest.fixture
def image_host() -> Iterator[str]:
    """A local HTTP server with the menu photo at /menu.png (and a 404 elsewhere)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = menu_png() if self.path == "/menu.png" else b""
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=60)


def _data_url(data: bytes, content_type: str) -> str:
    return f"data:{content_type};base64,{base64.b64encode(data).decode()}"


def _last_user(scripted_llm) -> dict:
    return [m for m in scripted_llm.requests()[-1]["body"]["messages"] if m["role"] == "user"][-1]


def _stored() -> list[Attachment]:
    with all_tenants(reason="test reads what was stored"):
        return list(Attachment.objects.order_by("id"))


def _refused(call) -> openai.BadRequestError:
    with pytest.raises(openai.APIStatusError) as caught:
        call()
    return caught.value


def test_the_sdk_sends_an_image_as_a_data_url_and_a_vision_model_gets_it(server, vision_agent, tenant_admin,
                                                                         make_key, scripted_llm):  # fmt: skip
    _key, secret = make_key(tenant_admin)
    completion = _client(server, secret).chat.completions.create(
        model=vision_agent.slug,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What does the salmon cost?"},
            {"type": "image_url", "image_url": {"url": _data_url(menu_png(), "image/png"), "detail": "auto"}},
        ]}],
    )  # fmt: skip
    assert completion.choices[0].finish_reason == "stop"
    content = _last_user(scripted_llm)["content"]
    assert [part["type"] for part in content] == ["text", "image_url"]
    assert content[1]["image_url"]["url"].startswith("data:image/")
    [stored] = _stored()
    assert stored.kind == "image" and stored.content_type == "image/png" and stored.message_id is not None
    assert stored.conversation_id == completion.model_extra["conversation_id"]


def test_the_sdk_sends_an_image_url_fetched_through_the_network_guard(server, published, tenant_admin, make_key,
                                                                      scripted_llm, image_host, settings):  # fmt: skip
    settings.ATTACHMENT_URL_BLOCKED_NETWORKS = LOOPBACK_ALLOWED  # tests reach their local server; nothing else
    _key, secret = make_key(tenant_admin)
    _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What does the salmon cost?"},
            {"type": "image_url", "image_url": {"url": f"{image_host}/menu.png"}},
        ]}],
    )  # fmt: skip
    content = _last_user(scripted_llm)["content"]  # gpt-4 reads no images: the text read by OCR
    assert "text read by OCR" in content and "Grilled salmon" in content
    assert [attachment.name for attachment in _stored()] == ["menu.png"]


def test_an_image_url_on_a_private_address_is_refused_by_default(server, published, tenant_admin, make_key,
                                                                 scripted_llm, image_host):  # fmt: skip
    _key, secret = make_key(tenant_admin)
    error = _refused(lambda: _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": f"{image_host}/menu.png"}},
        ]}],
    ))  # fmt: skip
    assert error.status_code == 400 and error.body["code"] == "image_url_unavailable"
    # Said in the platform's default language (Chinese) to a client that names none.
    assert error.body["param"] == "messages[0].content[1]" and "私有" in error.body["message"]
    assert _stored() == [] and scripted_llm.requests() == []


def test_the_sdk_sends_a_pdf_file_part(server, published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "How much is the mapo tofu?"},
            {"type": "file", "file": {"file_data": _data_url(menu_pdf(), "application/pdf"), "filename": "menu.pdf"}},
        ]}],
    )  # fmt: skip
    content = _last_user(scripted_llm)["content"]
    assert "How much is the mapo tofu?" in content and "Mapo tofu 26 yuan" in content
    [stored] = _stored()
    assert (stored.name, stored.kind, stored.pages) == ("menu.pdf", "document", 2)


def test_langchain_human_message_with_an_image_block(server, vision_agent, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    chat = ChatOpenAI(model=vision_agent.slug, base_url=f"{server.url}/v1", api_key=secret, max_retries=0)
    message = HumanMessage(content=[
        {"type": "text", "text": "What is on this menu?"},
        {"type": "image_url", "image_url": {"url": _data_url(menu_png(), "image/png")}},
    ])  # fmt: skip
    assert chat.invoke([message]).content.startswith("You said")
    assert [part["type"] for part in _last_user(scripted_llm)["content"]] == ["text", "image_url"]
    assert len(_stored()) == 1


@pytest.mark.parametrize(
    ("part", "code"),
    [
        ({"type": "file", "file": {"file_data": _data_url(renamed_executable(), "image/png"), "filename": "a.png"}},
         "attachment_refused"),
        ({"type": "image_url", "image_url": {"url": _data_url(pixel_bomb_png(), "image/png")}}, "attachment_refused"),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,not*base64"}}, "invalid_base64"),
        ({"type": "image_url", "image_url": {"url": "ftp://example.com/a.png"}}, "invalid_image_url"),
        ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}, "unsupported_content"),
    ],
)  # fmt: skip
def test_bad_files_and_parts_are_refused_naming_the_part_and_nothing_is_stored(
    server, published, tenant_admin, make_key, scripted_llm, part, code
):
    _key, secret = make_key(tenant_admin)
    error = _refused(lambda: _client(server, secret).chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, part]}],
    ))  # fmt: skip
    assert error.status_code == 400 and error.body["code"] == code and len(error.body["message"]) > 20
    assert error.body["param"] == "messages[0].content[1]"
    assert _stored() == [] and scripted_llm.requests() == []


def test_of_two_images_the_refused_one_is_named_by_its_part(server, published, tenant_admin, make_key, scripted_llm):
    _key, secret = make_key(tenant_admin)
    good = {"type": "image_url", "image_url": {"url": _data_url(menu_png(), "image/png")}}
    bomb = {"type": "image_url", "image_url": {"url": _data_url(pixel_bomb_png(), "image/png")}}
    content = [{"type": "text", "text": "hi"}, good, bomb]
    error = _refused(lambda: _client(server, secret).chat.completions.create(
        model=published.solar.slug, messages=[{"role": "user", "content": content}],
    ))  # fmt: skip
    assert error.body["code"] == "attachment_refused" and error.body["param"] == "messages[0].content[2]"
    assert _stored() == [] and scripted_llm.requests() == []


def test_another_tenants_file_id_is_not_found(server, published, other_tenant, other_tenant_admin, tenant_admin,
                                              make_key, scripted_llm):  # fmt: skip
    _key, foreign_secret = make_key(other_tenant_admin, owner=other_tenant)
    foreign = _client(server, foreign_secret)
    foreign.chat.completions.create(
        model=published.foreign.slug,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "keep"},
            {"type": "file", "file": {"file_data": _data_url(menu_pdf(), "application/pdf"), "filename": "m.pdf"}},
        ]}],
    )  # fmt: skip
    [theirs] = _stored()
    _key, secret = make_key(tenant_admin)
    error = _refused(lambda: _client(server, secret).chat.completions.create(
        model=published.solar.slug,
        messages=[{"role": "user", "content": [{"type": "file", "file": {"file_id": str(theirs.pk)}}]}],
    ))  # fmt: skip
    assert error.status_code == 404 and error.body["code"] == "attachment_not_found"
    assert error.body["param"] == "messages[0].content[0]"
