"""Every way in starts turns through the engine's one admission (engine.admission), so every surface refuses the same
message the same way, in its own protocol, and stores nothing. A new surface joins by adding a driver to SURFACES.

Surfaces: the chat page's socket, the widget's socket, SSE (`/api/v1/conversations/{id}/messages/stream/`), REST
(`POST /api/v1/conversations/{id}/messages/`), `/v1/chat/completions` and `/mcp` (JSON-RPC `tools/call`), each driven
over the real ASGI stack (Daphne for HTTP, the project's ASGI application for sockets).

Files (issue 37): a surface that takes files by id takes a `files` keyword (FILE_SURFACES) and refuses an id that
is not the caller's the same way; the doors where a file's bytes come in (UPLOAD_DOORS, and /v1's inline parts)
refuse a bad file. A new door that takes files joins those tables too."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils.translation import override

from agents.services import agent_create, agent_publish, conversation_start
from api.keys import key_create, key_revoke
from api.models import ApiKey, KeyScope
from config.asgi import application
from core.db import database_sync_to_async
from engine.places import stream_slot_take
from engine.streams import get_frame_log
from evals.models import Case, Dataset, Run
from evals.runner import execute, run_start
from memory.attachments import AttachmentRefused, Upload, attachment_upload, prepare
from memory.models import Attachment, Conversation, Message
from tenants.models import Role
from tenants.scope import all_tenants, tenant_scope
from tests.api.attachment_files import renamed_executable, small_png
from tests.factories import MembershipFactory
from tests.llm.factories import ModelProviderFactory
from tests.rates import inside_one_window
from tests.turns import wait_turns
from tests.websockets import session_cookie
from tests.widget.helpers import HOST, ticket_for
from widget.models import EmbedToken

pytestmark = pytest.mark.django_db(transaction=True)

ALL_SCOPES = [KeyScope.READ, KeyScope.CHAT, KeyScope.MCP]


@dataclass
class World:
    base_url: str
    tenant: Any
    agent: Any
    member: Any  # the participant
    mine: Conversation  # the member's own conversation
    colleague_conversation: Conversation  # another member's
    foreign: Conversation  # another tenant's
    member_key: str
    admin_key: str
    admin: Any
    embed: EmbedToken
    visitor: str = ""
    visitor_conversation: Conversation | None = None


@dataclass
class Answer:
    """What a surface answered: the refusal's code (None: taken) and, for HTTP, the status."""

    code: str | int | None
    status: int | None = None
    # Which stored message it answered (a resent client_id is answered with the first one's).
    message: Any = None


@pytest.fixture
def world(asgi_live_server, tenant, other_tenant, member, scripted_llm, settings):
    settings.LLM_RETRY_BASE_DELAY = 0.01
    scripted_llm.set_rules({"when": {}, "reply": {"text": "ok"}})
    admin = MembershipFactory(tenant=tenant, role=Role.ADMIN).user
    colleague = MembershipFactory(tenant=tenant, role=Role.MEMBER).user
    foreign_user = MembershipFactory(tenant=other_tenant, role=Role.MEMBER).user
    made = {}
    for owner in (tenant, other_tenant):
        with tenant_scope(owner):
            ModelProviderFactory(tenant=owner, name="scripted", base_url=scripted_llm.base_url, is_default=True)
            agent = agent_create(tenant=owner, name="Helper", system_prompt="You help.", model="gpt-4")
            agent_publish(agent=agent, user=None)
            made[owner.pk] = agent
    agent = made[tenant.pk]
    with tenant_scope(tenant):
        mine = conversation_start(agent=agent, user=member)
        colleague_conversation = conversation_start(agent=agent, user=colleague)
        _key, member_key = key_create(tenant=tenant, user=member, name="member", scopes=ALL_SCOPES)
        _key, admin_key = key_create(tenant=tenant, user=admin, name="admin", scopes=ALL_SCOPES)
        embed = EmbedToken.objects.create(
            tenant=tenant, agent=agent, name="shop", allowed_origins=HOST, visitor_messages_per_hour=50
        )
    with tenant_scope(other_tenant):
        foreign = conversation_start(agent=made[other_tenant.pk], user=foreign_user)
    return World(
        base_url=asgi_live_server.url, tenant=tenant, agent=agent, member=member, mine=mine,
        colleague_conversation=colleague_conversation, foreign=foreign, member_key=member_key,
        admin_key=admin_key, admin=admin, embed=embed, visitor=uuid.uuid4().hex,
    )  # fmt: skip


def _snapshot() -> tuple[int, int, int]:
    with all_tenants(reason="test: the whole database's rows"):
        return Message.objects.count(), Conversation.objects.count(), Attachment.objects.count()


# --- the drivers: one per surface ---------------------------------------------------------------------------------
#
# send(world, who, conversation, content, client_id) -> Answer. `who`: "member" (the participant), "admin" (may read
# every conversation of the tenant, may post into none but their own). `conversation`: None for the member's own.
# A surface that takes files by id also takes `files`: the ids sent with the message (FILE_SURFACES).


async def _socket_answer(socket: WebsocketCommunicator, client_id: str) -> Answer:
    while True:
        frame = await socket.receive_json_from(timeout=10)
        if frame["type"] == "error" and frame.get("seq") is None:
            return Answer(frame["code"])
        if frame["type"] == "user_message" and frame.get("client_id") == client_id:
            return Answer(None, message=frame["message_id"])


def _frame(content: Any, client_id: str, files: Sequence[int]) -> dict[str, Any]:
    """A user_message frame (the chat page's and the widget's socket), with its files' ids when it has some."""
    frame = {"type": "user_message", "client_id": client_id, "content": content}
    return {**frame, "attachments": list(files)} if files else frame


async def chat_socket(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str, files: Sequence[int] = ()
) -> Answer:
    user = world.admin if who == "admin" else world.member
    conversation = conversation or world.mine
    cookie = await database_sync_to_async(session_cookie)(user, world.tenant)
    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver"), (b"cookie", cookie)]
    socket = WebsocketCommunicator(application, f"/ws/chat/{conversation.pk}/", headers=headers)
    connected, code = await socket.connect()
    if not connected:  # the socket's way of saying "no such conversation": it never opens
        return Answer("conversation_not_found" if code == 4403 else f"close-{code}")
    try:
        assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
        await socket.send_json_to(_frame(content, client_id, files))
        return await _socket_answer(socket, client_id)
    finally:
        await socket.disconnect()


async def widget_socket(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str, files: Sequence[int] = ()
) -> Answer:
    assert who == "member" and conversation is None  # a visitor names no conversation: the embed and their id do
    ticket = await database_sync_to_async(ticket_for)(Client(), world.embed)
    socket = WebsocketCommunicator(
        application,
        f"/ws/embed/{world.embed.token}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")],
    )
    connected, code = await socket.connect()
    assert connected, code
    try:
        await socket.send_json_to({"type": "visitor", "ticket": ticket, "visitor": world.visitor})
        assert (await socket.receive_json_from(timeout=5))["type"] == "hello"
        await socket.send_json_to(_frame(content, client_id, files))
        return await _socket_answer(socket, client_id)
    finally:
        await socket.disconnect()


def _key(world: World, who: str) -> str:
    return world.admin_key if who == "admin" else world.member_key


async def _post(
    world: World, who: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        return await http.post(
            path, content=json.dumps(body), headers={"Authorization": f"Bearer {_key(world, who)}",
                                                     "Content-Type": "application/json", **(headers or {})},
        )  # fmt: skip


def _http_answer(response: httpx.Response) -> Answer:
    if response.status_code >= 400:
        return Answer(response.json()["error"]["code"], response.status_code)
    return Answer(None, response.status_code)


def _sse_answer(response: httpx.Response) -> Answer:
    first = next(line for line in response.text.splitlines() if line.startswith("data: "))
    return Answer(None, response.status_code, message=json.loads(first[6:])["message_id"])


def _message_body(content: Any, client_id: str, files: Sequence[int]) -> dict[str, Any]:
    """REST's and SSE's message body, with its files' ids (`attachments`) when it has some."""
    body = {"content": content, "client_id": client_id}
    return {**body, "attachments": list(files)} if files else body


async def sse(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str, files: Sequence[int] = ()
) -> Answer:
    conversation = conversation or world.mine
    path = f"/api/v1/conversations/{conversation.pk}/messages/stream/"
    response = await _post(world, who, path, _message_body(content, client_id, files))
    return _http_answer(response) if response.status_code >= 400 else _sse_answer(response)


async def rest(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str, files: Sequence[int] = ()
) -> Answer:
    conversation = conversation or world.mine
    path = f"/api/v1/conversations/{conversation.pk}/messages/"
    response = await _post(world, who, path, _message_body(content, client_id, files))
    answer = _http_answer(response)
    if answer.code is None:
        answer.message = response.json()["message"]["id"]
    return answer


async def openai_v1(
    world: World, who: str, conversation: Conversation | None, content: Any, client_id: str, files: Sequence[int] = ()
) -> Answer:
    conversation = conversation or world.mine
    if files:  # OpenAI's content parts: the text, then a file part per id uploaded before (REST)
        parts = [{"type": "file", "file": {"file_id": str(file_id)}} for file_id in files]
        content = [{"type": "text", "text": content}, *parts] if isinstance(content, str) else [*content, *parts]
    body = {"model": conversation.agent.slug, "messages": [{"role": "user", "content": content}],
            "metadata": {"conversation_id": str(conversation.pk)}}  # fmt: skip
    response = await _post(world, who, "/v1/chat/completions", body, {"Idempotency-Key": client_id})
    answer = _http_answer(response)
    if answer.code is None:
        answer.message = response.json()["id"]  # one completion id per stored user message
    return answer


# /mcp takes no files: an agent's tool takes a message's text only (api.mcp_server), so it has no `files`.
async def mcp(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    conversation = conversation or world.mine
    arguments = {"message": content, "conversation_id": conversation.pk}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": conversation.agent.slug, "arguments": arguments}}  # fmt: skip
    response = await _post(world, who, "/mcp", call, {"Accept": "application/json, text/event-stream"})
    body = response.json()
    if "error" in body and "jsonrpc" in body:  # a JSON-RPC error: refused at the door (data.code), or by the protocol
        data = body["error"].get("data")
        refusal = data.get("code") if isinstance(data, dict) else None
        return Answer(refusal or body["error"]["code"], response.status_code)
    if response.status_code >= 400:
        return _http_answer(response)
    result = body["result"]
    if result.get("isError"):
        return Answer((result.get("structuredContent") or {}).get("error", {}).get("code") or "tool_error")
    return Answer(None)


# An evaluation run (evals.runner) posts each case's turns into a conversation it starts itself (source "eval"), as
# the administrator who started the run: it names no conversation, carries no files, and `who` does not change who
# it runs as. The case is stored as it is (not through evals.services, which refuses an empty turn itself): what is
# tested is the run's way in, the engine's admission. A refusal ends the run (execute answers its code).
async def eval_run(world: World, who: str, conversation: Conversation | None, content: Any, client_id: str) -> Answer:
    assert conversation is None

    def start() -> Run:
        with tenant_scope(world.tenant):
            dataset = Dataset.objects.create(tenant=world.tenant, agent=world.agent, name=f"conformance {client_id}")
            Case.objects.create(tenant=world.tenant, dataset=dataset, turns=[content],
                                expectations=[{"kind": "contains", "text": "ok"}])  # fmt: skip
            return run_start(dataset=dataset, version=None, user=world.admin, confirm_budget=True, queue=False)

    def first_message(run: Run) -> int | None:
        with tenant_scope(world.tenant):
            return (
                Message.objects.filter(conversation__in=run.results.values("conversation"))
                .values_list("pk", flat=True)
                .order_by("pk")
                .first()
            )

    run = await database_sync_to_async(start)()
    end = await execute(run.pk, world.tenant.pk)
    if end.code:
        return Answer(end.code)
    return Answer(None, message=await database_sync_to_async(first_message)(run))


SURFACES: dict[str, Callable[..., Awaitable[Answer]]] = {
    "chat_socket": chat_socket,
    "widget_socket": widget_socket,
    "sse": sse,
    "rest": rest,
    "openai_v1": openai_v1,
    "mcp": mcp,
    "eval_run": eval_run,
}
HTTP_KEY_SURFACES = ("sse", "rest", "openai_v1", "mcp")
# The surfaces whose messages carry files by id (every one but /mcp, whose tools take text only, and an evaluation
# run, whose cases are text).
FILE_SURFACES = [name for name in SURFACES if name not in ("mcp", "eval_run")]


# --- the cases ----------------------------------------------------------------------------------------------------


async def _refused_and_nothing_stored(surface: str, world: World, code: str, **send: Any) -> Answer:
    before = await database_sync_to_async(_snapshot)()
    answer = await SURFACES[surface](world, send.pop("who", "member"), send.pop("conversation", None),
                                     send.pop("content", "hello"), send.pop("client_id", uuid.uuid4().hex),
                                     **send)  # fmt: skip
    await wait_turns()
    assert answer.code == code, (surface, answer)
    assert await database_sync_to_async(_snapshot)() == before, f"{surface} stored something it refused"
    return answer


MESSAGE_CASES = {
    "too_long": ("x" * 20_001, "message_too_long"),
    "nul": ("hello\x00world", "invalid_characters"),
    "lone_surrogate": ("hello\ud800world", "invalid_characters"),
    "empty": ("   ", "empty_message"),
}
# Where a surface's protocol refuses the request before any turn is asked for: the `mcp` package's JSON-RPC layer
# cannot decode a lone surrogate, and answers JSON-RPC's parse error (-32700) itself; nothing reaches the engine.
PROTOCOL_REFUSALS = {("mcp", "lone_surrogate"): -32700}
# An evaluation case's turns are a JSON column, which on PostgreSQL cannot hold a NUL or a lone surrogate: such a
# turn never reaches a run (the case services must refuse it when the case is written).
NOT_APPLICABLE = {("eval_run", "nul"), ("eval_run", "lone_surrogate")}


@pytest.mark.parametrize(
    ("surface", "case"),
    [(surface, case) for surface in SURFACES for case in MESSAGE_CASES if (surface, case) not in NOT_APPLICABLE],
)
async def test_every_surface_refuses_a_bad_message_the_same_way(surface, case, world):
    content, code = MESSAGE_CASES[case]
    await _refused_and_nothing_stored(surface, world, PROTOCOL_REFUSALS.get((surface, case), code), content=content)


# The widget's visitor cannot name a conversation (the embed token and their id choose it), nor can an evaluation run
# (it starts its own), so they have no such case.
NAMING_SURFACES = [name for name in SURFACES if name not in ("widget_socket", "eval_run")]


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_another_tenants_conversation(surface, world):
    await _refused_and_nothing_stored(surface, world, "conversation_not_found", conversation=world.foreign)


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_a_post_into_another_members_conversation_even_for_an_admin(surface, world):
    """The finding: an owner's or admin's key wrote into a member's private conversation on /mcp, REST and /v1."""
    await _refused_and_nothing_stored(
        surface, world, "conversation_not_found", who="admin", conversation=world.colleague_conversation
    )


async def test_an_admin_still_reads_another_members_conversation(world):
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        path = f"/api/v1/conversations/{world.colleague_conversation.pk}/messages/"
        response = await http.get(path, headers={"Authorization": f"Bearer {world.admin_key}"})
    assert response.status_code == 200


@pytest.mark.parametrize("surface", list(SURFACES))
async def test_every_surface_refuses_when_the_tenants_budget_is_spent(surface, world):
    world.tenant.monthly_token_budget = 0
    await database_sync_to_async(world.tenant.save)(update_fields=["monthly_token_budget"])
    await _refused_and_nothing_stored(surface, world, "quota_exceeded")


@pytest.mark.parametrize("surface", NAMING_SURFACES)
async def test_every_surface_refuses_while_another_turn_of_the_conversation_runs(surface, world):
    log = get_frame_log()
    assert await log.claim_turn(world.mine.pk, 10**9) is None  # a turn of this conversation runs elsewhere
    try:
        await _refused_and_nothing_stored(surface, world, "conversation_busy")
    finally:
        await log.release_turn(world.mine.pk, 10**9)


@pytest.mark.parametrize("surface", HTTP_KEY_SURFACES)
async def test_every_key_surface_refuses_a_revoked_key(surface, world):
    def revoke() -> None:
        with tenant_scope(world.tenant):
            key_revoke(key=ApiKey.objects.get(prefix=world.member_key.partition(".")[0]))

    await database_sync_to_async(revoke)()
    await _refused_and_nothing_stored(surface, world, "revoked_api_key")


@pytest.mark.parametrize("surface", ["sse", "openai_v1"])
async def test_every_streaming_key_surface_refuses_over_the_tenants_stream_limit(surface, world, settings):
    settings.API_TENANT_MAX_STREAMS = 1
    held = await database_sync_to_async(stream_slot_take)(world.tenant.pk, 1)
    assert held is not None
    try:
        if surface == "openai_v1":  # a streamed completion, as a client asks for one
            body = {"model": world.agent.slug, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            before = await database_sync_to_async(_snapshot)()
            answer = _http_answer(await _post(world, "member", "/v1/chat/completions", body))
            assert (answer.code, answer.status) == ("too_many_streams", 429)
            assert await database_sync_to_async(_snapshot)() == before
        else:
            await _refused_and_nothing_stored(surface, world, "too_many_streams")
    finally:
        await held.arelease()


@pytest.mark.parametrize("surface", ["chat_socket", "widget_socket", "sse", "rest", "openai_v1"])
async def test_every_surface_answers_a_resent_client_id_once(surface, world):
    client_id = "dup"
    first = await SURFACES[surface](world, "member", None, "hello", client_id)
    await wait_turns()
    assert first.code is None and first.message is not None, first
    before = await database_sync_to_async(_snapshot)()
    again = await SURFACES[surface](world, "member", None, "hello", client_id)
    await wait_turns()
    assert again.code is None and again.message == first.message, (surface, first, again)
    assert await database_sync_to_async(_snapshot)() == before


# The pages' own rate: a member's messages per minute on the chat socket. Keys have API_KEY_RATE per request
# (tests/api), visitors their embed's hourly rate (tests/widget/test_socket.py): a key is not held to the pages' rate.
async def test_the_chat_page_refuses_a_member_over_their_message_rate_and_a_key_is_not_held_to_it(world, settings):
    settings.CHAT_USER_MESSAGES_PER_MINUTE = 1
    await inside_one_window()
    first = await chat_socket(world, "member", None, "one", uuid.uuid4().hex)
    await wait_turns()
    assert first.code is None
    await _refused_and_nothing_stored("chat_socket", world, "user_rate_limited", content="two")
    by_key = await rest(world, "member", None, "three", uuid.uuid4().hex)
    assert by_key.code is None, by_key


# --- files (issue 37) ---------------------------------------------------------------------------------------------


@pytest.fixture
def files_world(world, settings, tmp_path) -> World:
    """The world with its files stored under the test's folder and an embed whose visitors may send files."""
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
    world.embed.files_allowed = True
    with tenant_scope(world.tenant):
        world.embed.save(update_fields=["files_allowed"])
    return world


def _uploaded_by(conversation: Conversation) -> int:
    """A file uploaded (not yet sent) by the user of `conversation`, in its tenant."""
    with tenant_scope(conversation.tenant):
        return attachment_upload(user=conversation.user, upload=Upload(name="theirs.png", data=small_png())).pk


FILE_OWNERS = {
    "another_tenants": lambda world: world.foreign,
    "another_members": lambda world: world.colleague_conversation,
}


@pytest.mark.parametrize("surface", FILE_SURFACES)
@pytest.mark.parametrize("owner", list(FILE_OWNERS))
async def test_every_surface_refuses_a_file_that_is_not_the_callers_the_same_way(surface, owner, files_world):
    """Another tenant's file id and another member's are one answer: no such file (404 on HTTP), nothing stored."""
    file_id = await database_sync_to_async(_uploaded_by)(FILE_OWNERS[owner](files_world))
    answer = await _refused_and_nothing_stored(surface, files_world, "attachment_not_found", files=[file_id])
    assert answer.status in (None, 404), answer


def _sent_with(file_id: int) -> str | None:
    """The text of the message a file was sent with (None: not sent)."""
    with all_tenants(reason="test: where a file went"):
        return Attachment.objects.filter(pk=file_id).values_list("message__content", flat=True).first()


@pytest.mark.parametrize("surface", FILE_SURFACES)
async def test_every_surface_takes_the_callers_own_file(surface, files_world):
    """The other half: the caller's own file (the member's, or the visitor's own upload) goes with the message."""
    if surface == "widget_socket":
        uploaded, words = await widget_upload(files_world, "red.png", small_png())
        assert uploaded.status == 201, words
        file_id = uploaded.message
    else:
        file_id = await database_sync_to_async(_uploaded_by)(files_world.mine)
    answer = await SURFACES[surface](files_world, "member", None, "with my file", uuid.uuid4().hex, files=[file_id])
    await wait_turns()
    assert answer.code is None, (surface, answer)
    assert await database_sync_to_async(_sent_with)(file_id) == "with my file"


# Where a file's bytes come in: the uploads (REST, the chat page's attach button, the widget's visitor) and /v1's
# inline content parts. upload(world, name, data) -> (Answer, the error's words).
UploadDoor = Callable[[World, str, bytes], Awaitable[tuple[Answer, str]]]


def _upload_answer(response: httpx.Response) -> tuple[Answer, str]:
    if response.status_code >= 400:
        error = response.json()["error"]
        return Answer(error["code"], response.status_code), error["message"]
    return Answer(None, response.status_code, message=response.json().get("id")), ""


async def rest_upload(world: World, name: str, data: bytes) -> tuple[Answer, str]:
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        response = await http.post("/api/v1/attachments/", files={"file": (name, data)},
                                   headers={"Authorization": f"Bearer {world.member_key}"})  # fmt: skip
    return _upload_answer(response)


async def chat_upload(world: World, name: str, data: bytes) -> tuple[Answer, str]:
    """The attach button's upload into the member's own conversation, with their session and the page's CSRF token."""
    cookie = (await database_sync_to_async(session_cookie)(world.member, world.tenant)).decode()
    csrf = uuid.uuid4().hex  # 32 characters, a CSRF secret's shape
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        response = await http.post(
            "/chat/attachments/", data={"conversation": str(world.mine.pk)}, files={"file": (name, data)},
            headers={"Cookie": f"{cookie}; csrftoken={csrf}", "X-CSRFToken": csrf},
        )  # fmt: skip
    return _upload_answer(response)


async def widget_upload(world: World, name: str, data: bytes) -> tuple[Answer, str]:
    ticket = await database_sync_to_async(ticket_for)(Client(), world.embed)
    async with httpx.AsyncClient(base_url=world.base_url, timeout=30) as http:
        response = await http.post(f"/embed/{world.embed.token}/attachments/", files={"file": (name, data)},
                                   data={"ticket": ticket, "visitor": world.visitor})  # fmt: skip
    return _upload_answer(response)


async def openai_v1_inline(world: World, name: str, data: bytes) -> tuple[Answer, str]:
    """The file as an OpenAI `file` content part of the message (file_data, a data: URL), into the member's own
    conversation: refused by the admission, as ATTACHMENT_REFUSED, naming the part."""
    url = f"data:application/pdf;base64,{base64.b64encode(data).decode()}"
    content = [{"type": "text", "text": "hello"}, {"type": "file", "file": {"file_data": url, "filename": name}}]
    body = {"model": world.agent.slug, "messages": [{"role": "user", "content": content}],
            "metadata": {"conversation_id": str(world.mine.pk)}}  # fmt: skip
    response = await _post(world, "member", "/v1/chat/completions", body)
    answer, words = _upload_answer(response)
    assert response.status_code < 400 or response.json()["error"]["param"] == "messages[0].content[1]"
    return answer, words


UPLOAD_DOORS: dict[str, UploadDoor] = {
    "rest_upload": rest_upload,
    "chat_upload": chat_upload,
    "widget_upload": widget_upload,
    "openai_v1_inline": openai_v1_inline,
}
# An upload is refused by the file's reader, with the file's own code (memory.attachments.AttachmentRefusedCode); a
# message's inline file by the admission, as ATTACHMENT_REFUSED (the file's code in its params). The words are the
# file's reader's in both.
BAD_FILE_CODES = {door: ("executable", 415) for door in UPLOAD_DOORS}
BAD_FILE_CODES["openai_v1_inline"] = ("attachment_refused", 400)


def _readers_words(name: str, data: bytes, language: str) -> str:
    """What the file's reader (memory.attachments.prepare) says of this file, in `language`."""
    with override(language):
        try:
            prepare(Upload(name=name, data=data))
        except AttachmentRefused as refused:
            return refused.message
    raise AssertionError(f"the reader took {name}")


@pytest.mark.parametrize("door", list(UPLOAD_DOORS))
async def test_every_door_that_takes_a_files_bytes_refuses_a_renamed_program_and_stores_nothing(
    door, files_world, settings
):
    before = await database_sync_to_async(_snapshot)()
    answer, words = await UPLOAD_DOORS[door](files_world, "invoice.pdf", renamed_executable())
    await wait_turns()
    assert (answer.code, answer.status) == BAD_FILE_CODES[door], (door, answer, words)
    # The reader's own words (what is wrong, what to send instead), in the door's language: the widget's ticket
    # says English (tests.widget.helpers.ticket_for); the others speak the platform's default.
    language = "en" if door == "widget_upload" else settings.LANGUAGE_CODE
    assert words == await database_sync_to_async(_readers_words)("invoice.pdf", renamed_executable(), language)
    assert await database_sync_to_async(_snapshot)() == before, f"{door} stored a file it refused"


@pytest.mark.parametrize("door", list(UPLOAD_DOORS))
async def test_every_door_that_takes_a_files_bytes_takes_a_good_one(door, files_world):
    """The other half of the refusal above: the same doors, driven the same way, take a real image."""
    answer, words = await UPLOAD_DOORS[door](files_world, "red.png", small_png())
    await wait_turns()
    assert answer.code is None and answer.status in (200, 201), (door, answer, words)
