"""Files in the website widget (issue 37): off unless the embed token allows them (no button, uploads and socket
messages with files refused), the embed's own size limit, a visitor's upload sent with their message over the
widget's socket, and a file served only to the visitor who sent it (never to another visitor, another embed's
visitor or a bad ticket)."""

from __future__ import annotations

import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from core.db import database_sync_to_async
from memory.models import Attachment, Message, Visitor
from tenants.scope import all_tenants, tenant_scope
from tests.api.attachment_files import menu_pdf, small_png
from tests.turns import wait_turns
from tests.widget.helpers import ChatPage, communicator, make_embed, new_visitor, open_chat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
    settings.CHAT_STREAM_PREFIX = f"test-widget-files-{uuid.uuid4().hex[:12]}"


def _upload(client: Client, page: ChatPage, name: str, data: bytes):
    fields = page.config["uploadFields"]
    return client.post(page.config["attachUrl"], {**fields, "file": SimpleUploadedFile(name, data)})


def _fetch(client: Client, page: ChatPage, attachment_id: int, fields: dict | None = None):
    url = page.config["attachmentUrl"].replace("/0/", f"/{attachment_id}/")
    return client.post(url, fields if fields is not None else page.config["uploadFields"])


def _count() -> int:
    with all_tenants(reason="test counts what was stored"):
        return Attachment.objects.count()


def test_files_are_off_unless_the_embed_allows_them(tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url)
    client = Client()
    page = open_chat(client, embed, new_visitor())
    assert page.config["attachUrl"] == "" and 'id="chat-attach"' not in page.response.content.decode()
    response = client.post(
        f"/embed/{embed.token}/attachments/",
        {**page.config["uploadFields"], "file": SimpleUploadedFile("a.png", small_png())},
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "attachments_not_allowed"
    assert _count() == 0


def test_the_embeds_own_size_limit(tenant, scripted_llm):
    embed = make_embed(tenant, scripted_llm.base_url, files_allowed=True, max_file_mb=1)
    client = Client()
    page = open_chat(client, embed, new_visitor())
    assert page.config["maxFileBytes"] == 1024 * 1024 and 'id="chat-attach"' in page.response.content.decode()
    response = _upload(client, page, "big.pdf", menu_pdf() + b" " * (1024 * 1024))
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"
    assert "1 MB" in response.json()["error"]["message"] and _count() == 0


@pytest.mark.asyncio
async def test_a_visitor_sends_a_file_and_only_they_can_fetch_it(tenant, other_tenant, scripted_llm):
    embed = await _sync(lambda: make_embed(tenant, scripted_llm.base_url, files_allowed=True))
    client, visitor = Client(), new_visitor()
    page = await _sync(open_chat, client, embed, visitor)
    uploaded = await _sync(_upload, client, page, "menu.pdf", menu_pdf())
    assert uploaded.status_code == 201, uploaded.content
    file_id = uploaded.json()["id"]

    socket = communicator(page.ws_path)
    assert (await socket.connect())[0]
    await socket.send_json_to(page.socket_auth)
    assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
    await socket.send_json_to(
        {"type": "user_message", "client_id": "c1", "content": "How much is the mapo tofu?", "attachments": [file_id]}
    )
    frames = []
    while not frames or frames[-1]["type"] not in ("done", "error"):
        frames.append(await socket.receive_json_from(timeout=15))
    await socket.disconnect()
    await wait_turns()
    user_frame = next(frame for frame in frames if frame["type"] == "user_message")
    assert [file["name"] for file in user_frame["attachments"]] == ["menu.pdf"]
    assert frames[-1]["type"] == "done"
    assert "Mapo tofu 26 yuan" in str(scripted_llm.requests()[-1]["body"]["messages"])

    own = await _sync(_fetch, client, page, file_id)
    assert own.status_code == 200 and b"".join(own.streaming_content) == menu_pdf()
    other_page = await _sync(open_chat, Client(), embed, new_visitor())
    assert (await _sync(_fetch, Client(), other_page, file_id)).status_code == 404
    foreign = await _sync(lambda: make_embed(other_tenant, scripted_llm.base_url, files_allowed=True))
    foreign_page = await _sync(open_chat, Client(), foreign, new_visitor())
    assert (await _sync(_fetch, Client(), foreign_page, file_id)).status_code == 404
    forged = {**page.config["uploadFields"], "ticket": "forged"}
    assert (await _sync(_fetch, Client(), page, file_id, forged)).status_code == 403


@pytest.mark.asyncio
async def test_a_socket_message_with_files_through_an_embed_without_them_is_refused(tenant, scripted_llm):
    embed = await _sync(make_embed, tenant, scripted_llm.base_url)
    page = await _sync(open_chat, Client(), embed, new_visitor())
    socket = communicator(page.ws_path)
    assert (await socket.connect())[0]
    await socket.send_json_to(page.socket_auth)
    assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
    await socket.send_json_to({"type": "user_message", "client_id": "c1", "content": "hi", "attachments": [1]})
    error = await socket.receive_json_from(timeout=5)
    await socket.disconnect()
    assert error["type"] == "error" and error["code"] == "attachments_not_allowed"
    assert not await _sync(_messages_exist, tenant)


def _messages_exist(tenant) -> bool:
    with tenant_scope(tenant):
        return Message.objects.exists()


async def _sync(function, *args):
    return await database_sync_to_async(function)(*args)


def _visitors(embed) -> int:
    with tenant_scope(embed.tenant):
        return Visitor.objects.filter(embed_id=embed.pk).count()


@pytest.mark.asyncio
async def test_a_first_upload_obeys_the_new_visitor_rate_and_counts_the_visitor_once(tenant, scripted_llm, settings):
    """An upload made the visitor's account before their first message, so a visitor rotating their id could make
    accounts past the new-visitor rate a first message obeys. Now the upload obeys it, and the visitor it made is not
    counted again by their first message."""
    settings.WIDGET_NEW_VISITORS_PER_ADDRESS = 1
    settings.WIDGET_NEW_VISITORS_PER_TOKEN = 1
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    embed = await _sync(lambda: make_embed(tenant, scripted_llm.base_url, files_allowed=True))
    client = Client()
    page = await _sync(open_chat, client, embed, new_visitor())
    uploaded = await _sync(_upload, client, page, "menu.pdf", menu_pdf())
    assert uploaded.status_code == 201, uploaded.content

    # Their first message, with the file: the same visitor, not a second new one.
    socket = communicator(page.ws_path)
    assert (await socket.connect())[0]
    await socket.send_json_to(page.socket_auth)
    assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
    message = {"type": "user_message", "client_id": "c1", "content": "hi", "attachments": [uploaded.json()["id"]]}
    await socket.send_json_to(message)
    frames = []
    while not frames or frames[-1]["type"] not in ("done", "error"):
        frames.append(await socket.receive_json_from(timeout=15))
    await socket.disconnect()
    await wait_turns()
    assert frames[-1]["type"] == "done", frames[-1]

    # Another new visitor's first upload: over the rate, refused as their first message would be; nothing made.
    stored = await _sync(_count)
    other = Client()
    other_page = await _sync(open_chat, other, embed, new_visitor())
    refused = await _sync(_upload, other, other_page, "menu.pdf", menu_pdf())
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "new_visitors_limited"
    assert int(refused["Retry-After"]) > 0
    assert await _sync(_count) == stored and await _sync(_visitors, embed) == 1
