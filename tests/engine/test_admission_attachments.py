"""Files and images through the engine's one admission (issue 37): what the model receives for each kind of file and
model (the real openai SDK against the scripted server), what the window keeps, and that a refused message stores
nothing: no row, no file."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from agents.services import agent_create, agent_publish, conversation_start
from core.db import database_sync_to_async
from engine.admission import Admitted, Caller, CallerKind, Refusal, RefusalCode, Target, admit
from memory.attachments import Upload, attachment_upload
from memory.models import Attachment, ConversationSource, Message
from tenants.models import Membership, Role
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory
from tests.knowledge.factories import make_pdf
from tests.llm.factories import ModelProviderFactory
from tests.rates import inside_one_window
from tests.turns import wait_turns

pytestmark = pytest.mark.django_db(transaction=True)

OCR_IMAGES = Path(__file__).resolve().parents[2] / "bench" / "data" / "ocr"


@pytest.fixture(autouse=True)
def _storage(settings, tmp_path):
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
    settings.LLM_RETRY_BASE_DELAY = 0.01
    return tmp_path / "attachments"


def _stored_files(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def _agent(tenant, scripted_llm, *, vision: bool, overflow: dict | None = None):
    with tenant_scope(tenant):
        ModelProviderFactory(
            tenant=tenant,
            name="scripted",
            base_url=scripted_llm.base_url,
            is_default=True,
            chat_models=[{"name": "scripted", "context_window": 8192, "vision": vision}],
            default_chat_model="scripted",
        )
        fields = {"token_overflow_config": overflow} if overflow else {}
        agent = agent_create(tenant=tenant, name="Helper", system_prompt="You help.", model="scripted", **fields)
        agent_publish(agent=agent, user=None)
    return agent


def _caller(tenant, user) -> Caller:
    membership = Membership.objects.filter(tenant=tenant, user=user).first()
    return Caller(
        tenant=tenant, source=ConversationSource.CHAT, kind=CallerKind.MEMBER, user=user, membership=membership
    )


async def _setup(tenant, member, scripted_llm, *, vision: bool, overflow: dict | None = None):
    """(agent, caller), made on the database thread."""

    def made():
        return _agent(tenant, scripted_llm, vision=vision, overflow=overflow), _caller(tenant, member)

    return await database_sync_to_async(made)()


def _in_scope(tenant, fn):
    """`fn()` in the tenant's scope, on the database thread."""

    def run():
        with tenant_scope(tenant):
            return fn()

    return database_sync_to_async(run)()


async def _send(caller, agent, content, client_id, **files):
    result = await admit(caller=caller, target=Target(agent=agent), content=content, client_id=client_id, **files)
    await wait_turns()
    return result


def _last_user(scripted_llm) -> dict:
    request = scripted_llm.requests()[-1]["body"]
    return [message for message in request["messages"] if message["role"] == "user"][-1]


def _system(scripted_llm) -> str:
    return scripted_llm.requests()[-1]["body"]["messages"][0]["content"]


def menu_png() -> bytes:
    return (OCR_IMAGES / "en_menu.png").read_bytes()


async def test_a_vision_model_receives_exactly_the_image_url_part(tenant, member, scripted_llm):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=True)
    admitted = await _send(caller, agent, "What does it cost?", "c1", uploads=[Upload("menu.png", menu_png())])
    assert isinstance(admitted, Admitted), admitted
    content = _last_user(scripted_llm)["content"]
    assert [part["type"] for part in content] == ["text", "image_url"]
    assert content[0] == {"type": "text", "text": "What does it cost?"}
    image = content[1]["image_url"]
    assert set(image) == {"url", "detail"} and image["detail"] == "auto"
    assert image["url"].startswith("data:image/")
    sent = Image.open(io.BytesIO(base64.b64decode(image["url"].split(",", 1)[1])))
    assert min(sent.size) <= 768  # resized as OpenAI's detail asks (1080x1440 -> 768x1024)
    message = await _in_scope(tenant, lambda: Message.objects.get(pk=admitted.submission.message.pk))
    assert message.token_count > 85 + 170  # the image's tokens are counted with the message
    assert "THE CORNER BISTRO" not in json.dumps(content)  # a vision model gets the image, not its OCR text


async def test_a_model_without_vision_receives_the_text_read_by_ocr(tenant, member, scripted_llm):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    admitted = await _send(caller, agent, "", "c1", uploads=[Upload("menu.png", menu_png())])
    assert isinstance(admitted, Admitted), admitted
    content = _last_user(scripted_llm)["content"]
    assert isinstance(content, str)
    assert content.startswith("[图片/Image menu.png, text read by OCR]\n")
    assert "Grilled salmon" in content and "21.00" in content
    title = await _in_scope(tenant, lambda: type(admitted.conversation).objects.get(pk=admitted.conversation.pk).title)
    assert title == "menu.png"  # a message of only a file is named after it


async def test_a_small_document_goes_whole_after_the_message(tenant, member, scripted_llm):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    pdf = make_pdf(["Service terms\nPayment is due within 30 days of the invoice.", "Late payment costs 2% a month."])
    admitted = await _send(caller, agent, "When must I pay?", "c1", uploads=[Upload("terms.pdf", pdf)])
    assert isinstance(admitted, Admitted), admitted
    content = _last_user(scripted_llm)["content"]
    assert content.startswith("When must I pay?\n\n[文档/Document terms.pdf, 2 pages]\n")
    assert "Payment is due within 30 days" in content and "Late payment costs 2%" in content
    echo = admitted.submission.frames[0].frame
    assert echo.attachments and echo.attachments[0]["name"] == "terms.pdf" and echo.attachments[0]["pages"] == 2


def _long_pdf() -> bytes:
    filler = "The committee reviewed routine matters of the office and found nothing to report this week."
    pages = []
    for number in range(1, 13):
        lines = [f"Chapter {number}"] + [f"{filler} Item {number}.{line}." for line in range(22)]
        if number == 9:
            lines.insert(3, "The warranty of the boiler lasts seven years from installation.")
        pages.append("\n".join(lines))
    return make_pdf(pages)


async def test_a_large_document_gives_its_passages_cited_by_page(tenant, member, scripted_llm, settings):
    settings.ATTACHMENT_INLINE_TOKENS = 1000
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    upload = Upload("manual.pdf", _long_pdf())
    admitted = await _send(caller, agent, "How long is the boiler warranty?", "c1", uploads=[upload])
    assert isinstance(admitted, Admitted), admitted
    indexed, passages = await _in_scope(
        tenant, lambda: (Attachment.objects.get().indexed, Attachment.objects.get().passages.count())
    )
    assert indexed and passages > 5
    system = _system(scripted_llm)
    assert "## Passages of the files shared in this conversation" in system
    assert "[manual.pdf p.9]" in system and "seven years" in system
    content = _last_user(scripted_llm)["content"]
    assert "[文档/Document manual.pdf, 12 pages: too long to give whole" in content
    assert "Chapter 1" not in content  # the document itself is not inline


async def test_a_document_stays_reachable_after_its_message_left_the_sliding_window(
    tenant, member, scripted_llm, settings
):
    settings.ATTACHMENT_INLINE_TOKENS = 1000
    overflow = {"strategy": "sliding_window", "max_tokens": 1500, "reserve_ratio": 0.1}
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False, overflow=overflow)
    first = await _send(caller, agent, "Here is the manual.", "c1", uploads=[Upload("manual.pdf", _long_pdf())])
    assert isinstance(first, Admitted), first
    target = Target(conversation_id=first.conversation.pk)
    for number in range(6):
        words = " ".join(["filler words about something else entirely"] * 12)
        result = await _admit_and_wait(caller, target, f"Note {number}: {words}", f"n{number}")
        assert isinstance(result, Admitted), result
    await _admit_and_wait(caller, target, "How long is the boiler warranty?", "last")
    request = scripted_llm.requests()[-1]["body"]["messages"]
    assert all("Here is the manual." not in json.dumps(message) for message in request)  # its message left the window
    assert "[manual.pdf p.9]" in request[0]["content"] and "seven years" in request[0]["content"]


async def _admit_and_wait(caller, target, content, client_id):
    result = await admit(caller=caller, target=target, content=content, client_id=client_id)
    await wait_turns()
    return result


@database_sync_to_async
def _counts() -> tuple[int, int]:
    with all_tenants(reason="test: every tenant's rows"):
        return Attachment.objects.count(), Message.objects.count()


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("photo.png", b"MZ\x90\x00" + b"\x00" * 200 + b"This program cannot be run", "executable"),
        ("menu.pdf", make_pdf(["Lotus Garden menu"])[:60], "broken"),
    ],
)
async def test_a_refused_file_stores_nothing(tenant, member, scripted_llm, _storage, name, data, code):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    before = await _counts()
    refusal = await _send(caller, agent, "Look", "c1", uploads=[Upload(name, data)])
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.ATTACHMENT_REFUSED
    assert refusal.params["file_code"] == code and refusal.status == 400
    assert await _counts() == before and _stored_files(_storage) == []
    assert scripted_llm.requests() == []


async def test_a_message_refused_for_its_text_stores_none_of_its_files(
    tenant, member, scripted_llm, _storage, settings
):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    before = await _counts()
    refusal = await _send(caller, agent, "\x00", "c1", uploads=[Upload("menu.png", menu_png())])
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.INVALID_CHARACTERS
    settings.ATTACHMENTS_PER_MESSAGE = 1
    refusal = await _send(caller, agent, "two", "c2", uploads=[Upload("a.txt", b"one"), Upload("b.txt", b"two")])
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.TOO_MANY_ATTACHMENTS
    settings.ATTACHMENTS_PER_MESSAGE = 5
    settings.CHAT_USER_MESSAGES_PER_MINUTE = 1  # the message's own limits refuse it after its file was read
    await inside_one_window()
    assert isinstance(await _send(caller, agent, "first", "c3"), Admitted)
    files_before = await _counts()
    refusal = await _send(caller, agent, "second", "c4", uploads=[Upload("menu.png", menu_png())])
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.USER_RATE_LIMITED
    assert (await _counts())[0] == files_before[0] == before[0] and _stored_files(_storage) == []


async def test_a_busy_conversation_stores_no_file(tenant, member, scripted_llm, _storage):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)
    scripted_llm.set_rules({"when": {}, "reply": {"text": "a slow answer of several words", "delay": 0.5}})
    first = await admit(caller=caller, target=Target(agent=agent), content="hello", client_id="c1")
    second = await admit(
        caller=caller, target=Target(conversation_id=first.conversation.pk), content="and this", client_id="c2",
        # A text file: read at once, so the first turn still runs however busy the machine (an image's OCR could
        # outlast it).
        uploads=[Upload("notes.txt", b"Opening hours: 9 to 5.")],
    )  # fmt: skip
    await wait_turns()
    assert isinstance(second, Refusal) and second.code == RefusalCode.BUSY
    assert (await _counts())[0] == 0 and _stored_files(_storage) == []


async def test_another_members_or_tenants_upload_is_not_found(tenant, other_tenant, member, scripted_llm):
    agent, caller = await _setup(tenant, member, scripted_llm, vision=False)

    def uploads():
        colleague = MembershipFactory(tenant=tenant, role=Role.MEMBER).user
        stranger = MembershipFactory(tenant=other_tenant, role=Role.MEMBER).user
        with tenant_scope(tenant):
            theirs = attachment_upload(user=colleague, upload=Upload("notes.txt", b"the colleague's notes"))
            mine = attachment_upload(user=member, upload=Upload("mine.txt", b"my own notes about tea"))
        with tenant_scope(other_tenant):
            foreign = attachment_upload(user=stranger, upload=Upload("foreign.txt", b"another tenant's notes"))
        return theirs, mine, foreign

    theirs, mine, foreign = await database_sync_to_async(uploads)()
    for pk in (theirs.pk, foreign.pk, 987654):
        refusal = await _send(caller, agent, "read this", f"c{pk}", attachments=[pk])
        assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.ATTACHMENT_NOT_FOUND, pk
        assert refusal.status == 404
    admitted = await _send(caller, agent, "read this", "mine", attachments=[mine.pk])
    assert isinstance(admitted, Admitted), admitted
    assert "my own notes about tea" in _last_user(scripted_llm)["content"]
    bound = await _in_scope(
        tenant, lambda: Attachment.objects.values_list("message_id", "conversation_id").get(pk=mine.pk)
    )
    assert bound == (admitted.submission.message.pk, admitted.conversation.pk)
    other = await _in_scope(tenant, lambda: conversation_start(agent=agent, user=member))
    # Sent once, it belongs to its conversation: another conversation cannot take it.
    refusal = await _send_to(caller, other.pk, "x", "y", attachments=[mine.pk])
    assert isinstance(refusal, Refusal) and refusal.code == RefusalCode.ATTACHMENT_NOT_FOUND
    again = await _send_to(caller, admitted.conversation.pk, "once more", "z", attachments=[mine.pk])
    assert isinstance(again, Admitted), again  # in its own conversation it may be named again


async def _send_to(caller, conversation_id, content, client_id, **files):
    target = Target(conversation_id=conversation_id)
    result = await admit(caller=caller, target=target, content=content, client_id=client_id, **files)
    await wait_turns()
    return result
