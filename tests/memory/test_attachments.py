"""Conversations' files (memory.attachments): stored under a random name, read only by who may read the
conversation, limited per conversation, deleted with their conversation (the file too), expired by the retention
task, remembered by name; and the offline demo model answers about them."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from agents.services import agent_create, agent_publish, conversation_start
from core.db import database_sync_to_async
from engine.admission import Admitted, Caller, CallerKind, Target, admit
from llm.services import provider_ensure_demo
from memory.attachments import (
    AttachmentRefused,
    AttachmentRefusedCode,
    Upload,
    attachment_info,
    attachment_readable,
    attachment_upload,
)
from memory.longterm.extraction import with_shared_files
from memory.models import Attachment, AttachmentPassage, Conversation, ConversationSource, Message, Role
from memory.tasks import attachments_expire
from tenants.models import Membership
from tenants.models import Role as MemberRole
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory
from tests.knowledge.factories import make_pdf
from tests.turns import wait_turns

OCR_IMAGES = Path(__file__).resolve().parents[2] / "bench" / "data" / "ocr"


@pytest.fixture(autouse=True)
def storage_root(settings, tmp_path) -> Path:
    settings.ATTACHMENT_STORAGE_ROOT = str(tmp_path / "attachments")
    return tmp_path / "attachments"


def _files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file()) if root.exists() else []


@pytest.fixture
def conversation(tenant, member):
    with tenant_scope(tenant):
        agent = agent_create(tenant=tenant, name="Helper", system_prompt="You help.", model="gpt-4")
        return conversation_start(agent=agent, user=member)


def test_a_stored_file_has_a_random_name_in_the_tenants_folder(tenant, member, storage_root):
    with tenant_scope(tenant):
        attachment = attachment_upload(user=member, upload=Upload("../../etc/passwd.txt", b"root:x:0:0"))
    assert attachment.name == "passwd.txt"
    stored = Path(attachment.file.name)
    assert stored.parent.name == str(tenant.pk) and "passwd" not in stored.name and stored.suffix == ".txt"
    assert _files(storage_root) == [storage_root / attachment.file.name]
    assert (storage_root / attachment.file.name).stat().st_mode & 0o777 == 0o600
    assert attachment_info(attachment) == {
        "id": attachment.pk, "name": "passwd.txt", "kind": "document", "content_type": "text/plain", "size": 10,
        "pages": 0, "width": 0, "height": 0,
    }  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_the_file_leaves_the_storage_when_its_conversation_is_deleted(tenant, member, conversation, storage_root):
    with tenant_scope(tenant):
        kept = attachment_upload(user=member, upload=Upload("kept.txt", b"in another place"))
        attachment_upload(user=member, upload=Upload("notes.txt", b"some notes"), conversation=conversation)
        assert len(_files(storage_root)) == 2
        Conversation.objects.filter(pk=conversation.pk).delete()
        assert list(Attachment.objects.values_list("pk", flat=True)) == [kept.pk]
    assert _files(storage_root) == [storage_root / kept.file.name]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_deletion_keeps_the_file(tenant, member, conversation, storage_root):
    with tenant_scope(tenant):
        attachment_upload(user=member, upload=Upload("notes.txt", b"some notes"), conversation=conversation)
        with pytest.raises(RuntimeError), transaction.atomic():
            Conversation.objects.filter(pk=conversation.pk).delete()
            raise RuntimeError("changed my mind")
    assert len(_files(storage_root)) == 1


def test_who_may_read_a_file(tenant, member, tenant_admin, conversation):
    colleague = MembershipFactory(tenant=tenant, role=MemberRole.MEMBER).user
    with tenant_scope(tenant):
        sent = attachment_upload(user=member, upload=Upload("a.txt", b"sent"), conversation=conversation)
        unsent = attachment_upload(user=member, upload=Upload("b.txt", b"not sent yet"))

    def readable(user, attachment):
        membership = Membership.objects.filter(tenant=tenant, user=user).first()
        return attachment_readable(user=user, membership=membership, attachment=attachment)

    assert readable(member, sent) and readable(member, unsent)
    assert readable(tenant_admin, sent)  # administrators read every conversation of the tenant
    assert not readable(tenant_admin, unsent)  # an upload no message carries is its uploader's alone
    assert not readable(colleague, sent) and not readable(colleague, unsent)
    assert not attachment_readable(user=None, membership=None, attachment=sent)


def test_another_tenant_cannot_find_a_file(tenant, other_tenant, member):
    with tenant_scope(tenant):
        attachment = attachment_upload(user=member, upload=Upload("a.txt", b"mine"))
    with tenant_scope(other_tenant):
        assert not Attachment.objects.filter(pk=attachment.pk).exists()


def test_a_conversation_holds_at_most_its_limit(tenant, member, conversation, settings, storage_root):
    settings.ATTACHMENTS_PER_CONVERSATION = 2
    with tenant_scope(tenant):
        for name in ("a.txt", "b.txt"):
            attachment_upload(user=member, upload=Upload(name, b"text"), conversation=conversation)
        with pytest.raises(AttachmentRefused) as refused:
            attachment_upload(user=member, upload=Upload("c.txt", b"text"), conversation=conversation)
        assert refused.value.code == AttachmentRefusedCode.TOO_MANY_IN_CONVERSATION and refused.value.status == 400
        assert "2" in refused.value.message
        assert Attachment.objects.count() == 2
    assert len(_files(storage_root)) == 2


def test_a_refused_file_stores_nothing(tenant, member, storage_root, settings):
    settings.ATTACHMENT_MAX_BYTES = 100
    with tenant_scope(tenant):
        with pytest.raises(AttachmentRefused) as refused:
            attachment_upload(user=member, upload=Upload("big.txt", b"x" * 101))
        assert refused.value.code == AttachmentRefusedCode.TOO_LARGE and refused.value.status == 413
        with pytest.raises(AttachmentRefused) as refused:
            attachment_upload(user=member, upload=Upload("setup.png", b"MZ\x90\x00" + b"\x00" * 80))
        assert refused.value.code == AttachmentRefusedCode.EXECUTABLE
        assert not Attachment.objects.exists()
    assert _files(storage_root) == []


@pytest.mark.django_db(transaction=True)
def test_the_retention_task_deletes_old_files_and_unsent_uploads(tenant, member, conversation, settings, storage_root):
    with tenant_scope(tenant):
        message = Message.objects.create(tenant=tenant, conversation=conversation, role=Role.USER, content="hi")
        old = attachment_upload(user=member, upload=Upload("old.txt", b"old"), conversation=conversation)
        new = attachment_upload(user=member, upload=Upload("new.txt", b"new"), conversation=conversation)
        unsent = attachment_upload(user=member, upload=Upload("unsent.txt", b"never sent"))
        Attachment.objects.filter(pk__in=[old.pk, new.pk]).update(message=message)
        Attachment.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(days=40))
        Attachment.objects.filter(pk=unsent.pk).update(created_at=timezone.now() - dt.timedelta(days=2))
    settings.ATTACHMENT_RETENTION_DAYS = 0
    assert attachments_expire.delay().get() == 1  # only the upload never sent
    settings.ATTACHMENT_RETENTION_DAYS = 30
    assert attachments_expire.delay().get() == 1
    with all_tenants(reason="test"):
        assert list(Attachment.objects.values_list("name", flat=True)) == ["new.txt"]
        assert Message.objects.filter(pk=message.pk).exists()  # the message stays
    assert _files(storage_root) == [storage_root / new.file.name]


def test_the_schedule_of_the_retention_task_is_in_the_admin(db):
    assert PeriodicTask.objects.get(task="memory.attachments_expire").interval.period == "days"


def test_memory_keeps_a_shared_files_name_and_subject_not_its_text(tenant, member, conversation):
    text = "Tenancy agreement for Flat 3\n" + "The rent is 4200 yuan a month. " * 50
    with tenant_scope(tenant):
        message = Message.objects.create(tenant=tenant, conversation=conversation, role=Role.USER, content="Read it")
        attachment = attachment_upload(
            user=member, upload=Upload("lease.txt", text.encode()), conversation=conversation
        )
        Attachment.objects.filter(pk=attachment.pk).update(message=message)
        remembered = with_shared_files(message)
    assert remembered.startswith("Read it\n[Shared document / 分享的文件: lease.txt")
    assert "about: Tenancy agreement for Flat 3" in remembered
    assert "4200" not in remembered


def test_a_large_upload_is_indexed_with_pages(tenant, member, settings):
    settings.ATTACHMENT_INLINE_TOKENS = 200
    pages = [f"Page {n}\n" + "Ordinary words about the weather and the garden. " * 30 for n in range(1, 5)]
    with tenant_scope(tenant):
        attachment = attachment_upload(user=member, upload=Upload("report.pdf", make_pdf(pages)))
        assert attachment.indexed and attachment.pages == 4
        passages = list(AttachmentPassage.objects.filter(attachment=attachment).values_list("page", "embedder"))
    assert {page for page, _ in passages} == {1, 2, 3, 4}
    assert all(embedder.startswith("local_multilingual") for _, embedder in passages)


# --- the offline demo model ----------------------------------------------------------------------------------------


async def _demo_turn(tenant, member, content, upload):
    def setup():
        provider_ensure_demo(tenant=tenant)
        with tenant_scope(tenant):
            agent = agent_create(tenant=tenant, name="Demo", system_prompt="You help.", model="demo-scripted")
            agent_publish(agent=agent, user=None)
        membership = Membership.objects.get(tenant=tenant, user=member)
        caller = Caller(tenant=tenant, source=ConversationSource.CHAT, kind=CallerKind.MEMBER, user=member,
                        membership=membership)  # fmt: skip
        return agent, caller

    agent, caller = await database_sync_to_async(setup)()
    admitted = await admit(caller=caller, target=Target(agent=agent), content=content, client_id="c1", uploads=[upload])
    assert isinstance(admitted, Admitted), admitted
    result = await admitted.submission.task
    await wait_turns()
    return result


@pytest.mark.django_db(transaction=True)
async def test_the_demo_model_reads_a_document(tenant, member):
    pdf = make_pdf(["Lotus Garden menu\nKung Pao chicken 38 yuan", "Drinks\nJasmine tea 12 yuan"])
    result = await _demo_turn(tenant, member, "What is this?", Upload("menu.pdf", pdf))
    assert "menu.pdf" in result.message.content and "Lotus Garden menu" in result.message.content


@pytest.mark.django_db(transaction=True)
async def test_the_demo_model_reads_an_image_by_ocr(tenant, member):
    image = (OCR_IMAGES / "en_menu.png").read_bytes()
    result = await _demo_turn(tenant, member, "", Upload("menu.png", image))
    assert "menu.png" in result.message.content and "THE CORNER BISTRO" in result.message.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("image", "question", "line", "other"),
    [
        ("zh_menu.png", "宫保鸡丁多少钱？", "宫保鸡丁", "麻婆豆腐"),
        ("en_menu.png", "How much is the grilled salmon?", "Grilled salmon", "Caesar salad"),
    ],
)
async def test_the_demo_model_answers_a_price_from_a_photographed_menu(tenant, member, image, question, line, other):
    """The README's journey: the reply quotes the menu's line that names the dish, with its price, not the menu."""
    data = (OCR_IMAGES / image).read_bytes()
    result = await _demo_turn(tenant, member, question, Upload(image, data))
    answer = result.message.content
    assert line in answer and any(mark in answer.split(line, 1)[1][:20] for mark in ("¥", "$")), answer
    assert other not in answer, answer
