"""Files and images sent in conversations (issue 37, docs/attachments.md): stored, bound to the user message they
came with, readable by those who may read the conversation, and what each model is given of them.

A file is read once, when it arrives (knowledge.files: its type sniffed from the bytes, an image decoded with a
pixel bound and re-encoded without metadata, its text by the knowledge parsers or offline OCR); a large document is
cut and embedded then too (`prepare`, CPU work the caller runs off the event loop), so binding it to a message later
costs only database rows. Each turn, the messages in the window carry their files (`for_window`): a vision model the
image itself, any other model the text read from it; a small document whole after its message; a large one gives
the turn its best passages, cited "[name p.N]", for as long as the conversation lasts, whether its message is still
in the window or not.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from django.core.files.base import ContentFile
from django.db import transaction
from django.db.models import F, Q
from django.http import FileResponse
from django.utils import timezone
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge import images
from knowledge.chunking import chunk_sections
from knowledge.embedders import EmbedderError, local_embedder
from knowledge.files import FileKind, FileRefused, ReadFile, RefusedCode, read_file
from knowledge.keyword import BM25Index, terms_for
from knowledge.parsing import Section
from knowledge.ranking import CANDIDATES, Ranking, fuse_zscore
from llm.tokens import count_text, image_tokens
from llm.vision import is_vision
from memory.models import (
    Attachment,
    AttachmentKind,
    AttachmentPassage,
    Conversation,
    ConversationContext,
    Message,
    Role,
)
from memory.overflow import Addition
from memory.storage import attachment_storage
from tenants.access import may_administer
from tenants.scope import all_tenants, require_tenant

logger = logging.getLogger(__name__)

# The embedder of conversations' documents: the local multilingual model (offline, no quota; Chinese and English).
EMBEDDER = "local_multilingual"
PASSAGE_TOKENS = 300
PASSAGE_OVERLAP = 40
# Counted for the model the stored file was read for; the turn's own model counts the message again when it is sent.
COUNT_MODEL = "gpt-4"


class AttachmentRefusedCode(StrEnum):
    """Why a file was not taken: the file's own reasons (knowledge.files.RefusedCode) and those of the conversation."""

    TOO_LARGE = RefusedCode.TOO_LARGE.value
    EMPTY = RefusedCode.EMPTY.value
    UNSUPPORTED_TYPE = RefusedCode.UNSUPPORTED_TYPE.value
    EXECUTABLE = RefusedCode.EXECUTABLE.value
    TOO_MANY_PIXELS = RefusedCode.TOO_MANY_PIXELS.value
    BROKEN = RefusedCode.BROKEN.value
    ARCHIVE_BOMB = RefusedCode.ARCHIVE_BOMB.value
    NO_TEXT = RefusedCode.NO_TEXT.value
    NOT_FOUND = "not_found"
    TOO_MANY_IN_MESSAGE = "too_many_in_message"
    TOO_MANY_IN_CONVERSATION = "too_many_in_conversation"
    NOT_ALLOWED = "not_allowed"


_STATUS = {
    AttachmentRefusedCode.TOO_LARGE: 413,
    AttachmentRefusedCode.UNSUPPORTED_TYPE: 415,
    AttachmentRefusedCode.EXECUTABLE: 415,
    AttachmentRefusedCode.NOT_FOUND: 404,
    AttachmentRefusedCode.NOT_ALLOWED: 403,
}


class AttachmentRefused(Exception):
    """A file not taken, nothing stored: `code`, `message` (translated, says what to do), `status` (HTTP)."""

    def __init__(self, code: AttachmentRefusedCode, message: str, **params: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.params = params

    @property
    def status(self) -> int:
        return _STATUS.get(self.code, 400)

    @classmethod
    def from_file(cls, refused: FileRefused) -> AttachmentRefused:
        return cls(AttachmentRefusedCode(refused.code.value), refused.message, **refused.params)


def not_found() -> AttachmentRefused:
    """The one answer for an id that is not the caller's to use: missing, another member's, another tenant's."""
    return AttachmentRefused(
        AttachmentRefusedCode.NOT_FOUND, _("No such file: upload it again, then send the message.")
    )


def too_many_in_message() -> AttachmentRefused:
    limit = setting("ATTACHMENTS_PER_MESSAGE")
    return AttachmentRefused(
        AttachmentRefusedCode.TOO_MANY_IN_MESSAGE,
        _("A message may carry at most %(limit)s files. Send the others with another message.") % {"limit": limit},
        limit=limit,
    )


def too_many_in_conversation() -> AttachmentRefused:
    limit = setting("ATTACHMENTS_PER_CONVERSATION")
    return AttachmentRefused(
        AttachmentRefusedCode.TOO_MANY_IN_CONVERSATION,
        _("This conversation already holds %(limit)s files, the most allowed. Start a new conversation to send more.")
        % {"limit": limit},
        limit=limit,
    )


@dataclass(frozen=True)
class Upload:
    """A file as a door received it: the name its sender gave (shown, never used as a path) and its bytes."""

    name: str
    data: bytes


@dataclass(frozen=True)
class PassageDraft:
    position: int
    page: int | None
    text: str
    tokens: int
    terms: str
    vector: tuple[float, ...] | None


@dataclass(frozen=True)
class Prepared:
    """A file read and, when it is a large document, cut and embedded: everything but the database rows."""

    read: ReadFile
    sha256: str
    text_tokens: int
    passages: tuple[PassageDraft, ...] = ()
    embedder: str = ""

    @property
    def indexed(self) -> bool:
        return bool(self.passages)


# --- reading ------------------------------------------------------------------------------------------------------


def prepare(upload: Upload) -> Prepared:
    """Read `upload` (sniffed, bounded, parsed or OCR'd) and index it when it is a large document. CPU work: run it
    in a worker thread, never on the event loop. AttachmentRefused when the file is not taken."""
    try:
        read = read_file(upload.name, upload.data, max_bytes=setting("ATTACHMENT_MAX_BYTES"))
    except FileRefused as refused:
        raise AttachmentRefused.from_file(refused) from refused
    tokens = count_text(read.text, COUNT_MODEL)
    sha256 = hashlib.sha256(read.data).hexdigest()
    if read.kind != FileKind.DOCUMENT or tokens <= setting("ATTACHMENT_INLINE_TOKENS"):
        return Prepared(read=read, sha256=sha256, text_tokens=tokens)
    passages, signature = _passages(read)
    return Prepared(read=read, sha256=sha256, text_tokens=tokens, passages=passages, embedder=signature)


def _passages(read: ReadFile) -> tuple[tuple[PassageDraft, ...], str]:
    """A large document cut as the knowledge bases cut it (by sentences, pages kept) and embedded by the local
    multilingual model; keyword search alone when the model is unavailable."""
    sections = read.sections or [Section(read.text)]
    drafts = chunk_sections(sections, chunk_size=PASSAGE_TOKENS, chunk_overlap=PASSAGE_OVERLAP)
    vectors: list[tuple[float, ...] | None] = [None] * len(drafts)
    signature = ""
    try:
        model = local_embedder(EMBEDDER)
        matrix = model.embed([draft.text for draft in drafts])
        vectors = [tuple(float(value) for value in row) for row in matrix]
        signature = model.signature()
    except EmbedderError:
        logger.warning("attachment passages not embedded (keyword search only): %s", read.name, exc_info=True)
    passages = tuple(
        PassageDraft(
            position=draft.position,
            page=_page(draft.metadata),
            text=draft.text,
            tokens=draft.token_count,
            terms=" ".join(terms_for(draft.text)),
            vector=vector,
        )
        for draft, vector in zip(drafts, vectors, strict=True)
    )
    return passages, signature


def _page(metadata: Mapping[str, Any]) -> int | None:
    page = metadata.get("page")
    return int(page) if isinstance(page, int) or (isinstance(page, str) and page.isdigit()) else None


# --- storing ------------------------------------------------------------------------------------------------------


def _row(prepared: Prepared, *, user_id: int, conversation: Conversation | None, message: Message | None) -> Attachment:
    read = prepared.read
    return Attachment(
        tenant_id=require_tenant().pk,
        conversation=conversation,
        message=message,
        user_id=user_id,
        name=read.name[:255],
        kind=AttachmentKind(read.kind.value),
        content_type=read.content_type,
        size=len(read.data),
        sha256=prepared.sha256,
        width=read.width,
        height=read.height,
        pages=read.pages,
        text=read.text,
        from_ocr=read.from_ocr,
        token_count=prepared.text_tokens,
        indexed=prepared.indexed,
    )


def store(
    prepared: Prepared, *, user_id: int, conversation: Conversation | None = None, message: Message | None = None
) -> Attachment:
    """The file and its rows stored (in the tenant's scope, inside the caller's transaction if any), bound to
    `message` when it came with one. The file is written first and removed again when its rows are not stored; a
    caller whose own transaction then fails removes it with `discard`."""
    attachment = _row(prepared, user_id=user_id, conversation=conversation, message=message)
    attachment.file.save(prepared.read.name, ContentFile(prepared.read.data), save=False)
    try:
        attachment.save(force_insert=True)
        AttachmentPassage.objects.bulk_create(
            AttachmentPassage(
                tenant_id=attachment.tenant_id,
                attachment=attachment,
                conversation=conversation,
                position=draft.position,
                page=draft.page,
                text=draft.text,
                token_count=draft.tokens,
                terms=draft.terms,
                embedding=draft.vector,
                embedder=prepared.embedder if draft.vector is not None else "",
            )
            for draft in prepared.passages
        )
    except BaseException:
        discard([attachment.file.name])
        raise
    return attachment


def discard(names: Iterable[str]) -> None:
    """Remove files written for rows that were then not stored (a rolled-back transaction)."""
    storage = attachment_storage()
    for name in names:
        if name:
            try:
                storage.delete(name)
            except OSError:
                logger.warning("attachment file not removed: %s", name, exc_info=True)


def attachment_upload(*, user: Any, upload: Upload, conversation: Conversation | None = None) -> Attachment:
    """Read and store a file a user sends ahead of their message (the REST upload, the chat page's attach button),
    in the active tenant's scope; `conversation` when it is already known. AttachmentRefused when the file or the
    conversation's limit refuses it: nothing is stored then."""
    limit = setting("ATTACHMENTS_PER_CONVERSATION")
    if conversation is not None:
        held = Attachment.objects.filter(conversation=conversation).count()
    else:  # files uploaded and not (yet) sent count against the same limit
        held = Attachment.objects.filter(user=user, message__isnull=True, conversation__isnull=True).count()
    if held >= limit:
        raise too_many_in_conversation()
    prepared = prepare(upload)
    with transaction.atomic():
        return store(prepared, user_id=user.pk, conversation=conversation)


def attachment_readable(*, user: Any, membership: Any, attachment: Attachment) -> bool:
    """Who may fetch a file: the one who uploaded it, and whoever may read its conversation (its own user; the
    tenant's administrators read every conversation, as memory.selectors.access_conversation says)."""
    if user is None or getattr(user, "pk", None) is None:  # nobody, or an anonymous user
        return False
    if attachment.user_id == user.pk:
        return True
    conversation = attachment.conversation
    if conversation is None:
        return False
    if may_administer(user=user, membership=membership):
        return True
    return conversation.user_id == user.pk and conversation.parent_id is None and not conversation.is_test


def file_response(attachment: Attachment) -> FileResponse:
    """The stored bytes of `attachment` (for the chat page, the REST API and the widget) with headers that keep a
    browser from running them: an image inline, a document as a download, its sniffed type, no sniffing, no shared
    caching, a sandbox CSP."""
    image = attachment.kind == AttachmentKind.IMAGE
    response = FileResponse(
        attachment.file.open("rb"), content_type=attachment.content_type, as_attachment=not image,
        filename=attachment.name,
    )  # fmt: skip
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "private, max-age=300"
    response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    return response


def attachment_info(attachment: Attachment) -> dict[str, Any]:
    """What pages and frames show of a file (never its text or its stored name)."""
    return {
        "id": attachment.pk,
        "name": attachment.name,
        "kind": attachment.kind,
        "content_type": attachment.content_type,
        "size": attachment.size,
        "pages": attachment.pages,
        "width": attachment.width,
        "height": attachment.height,
    }


# --- a message's files ---------------------------------------------------------------------------------------------


@dataclass
class MessageFiles:
    """The files of one user message, checked by admission: `rows` already stored (uploaded before, or sent before
    in this conversation), `prepared` read from the request itself and stored with the message."""

    rows: list[Attachment] = field(default_factory=list)
    prepared: list[Prepared] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.rows or self.prepared)

    @property
    def count(self) -> int:
        return len(self.rows) + len(self.prepared)

    def title(self) -> str:
        """A name for an untitled conversation whose first message is only files."""
        names = [row.name for row in self.rows] + [prepared.read.name for prepared in self.prepared]
        return ", ".join(names)


def files_check(
    *, ids: Sequence[int], uploads: int, owner_id: int | None, conversation: Conversation | None
) -> list[Attachment]:
    """The stored files `ids` if the message may carry them, with `uploads` more sent inline: each must be the
    caller's own (`owner_id`: their account), not yet sent or already in this conversation, and the conversation
    must have room. AttachmentRefused otherwise (the same not-found for every id that is not the caller's)."""
    if len(ids) + uploads > setting("ATTACHMENTS_PER_MESSAGE"):
        raise too_many_in_message()
    wanted = list(dict.fromkeys(int(pk) for pk in ids))
    rows = list(Attachment.objects.filter(pk__in=wanted)) if wanted else []
    by_id = {row.pk: row for row in rows}
    here = conversation.pk if conversation is not None else None
    for pk in wanted:
        row = by_id.get(pk)
        if row is None or owner_id is None or row.user_id != owner_id:
            raise not_found()
        unsent = row.message_id is None and row.conversation_id in (None, here)
        if not unsent and (here is None or row.conversation_id != here):
            raise not_found()
    new = sum(1 for row in rows if row.conversation_id is None) + uploads
    if new:
        held = Attachment.objects.filter(conversation=conversation).count() if conversation is not None else 0
        if held + new > setting("ATTACHMENTS_PER_CONVERSATION"):
            raise too_many_in_conversation()
    return [by_id[pk] for pk in wanted]


def _vision(conversation: Conversation) -> bool:
    return is_vision(conversation.provider, conversation.model)


def attachment_tokens(attachment: Attachment, *, vision: bool) -> int:
    """What one file adds to its message when sent: the image's tokens for a vision model, else its text."""
    if attachment.kind == AttachmentKind.IMAGE and vision:
        return image_tokens(attachment.width, attachment.height)
    if attachment.kind == AttachmentKind.DOCUMENT and attachment.indexed:
        return count_text(_indexed_note(attachment), COUNT_MODEL)
    return attachment.token_count + count_text(_heading(attachment), COUNT_MODEL) + 2


def files_store(*, files: MessageFiles, conversation: Conversation, message: Message, user_id: int) -> list[Attachment]:
    """Bind the checked files to the stored `message` (inside its transaction): the stored ones updated, the inline
    ones written. Returns them in the message's order; raises after removing the files it wrote on failure."""
    written: list[str] = []
    try:
        stored = list(files.rows)
        fresh = [row.pk for row in stored if row.message_id is None]
        if fresh:
            Attachment.objects.filter(pk__in=fresh).update(conversation=conversation, message=message)
            AttachmentPassage.objects.filter(attachment_id__in=fresh).update(conversation=conversation)
            for row in stored:
                if row.pk in fresh:
                    row.conversation, row.message = conversation, message
        for prepared in files.prepared:
            row = store(prepared, user_id=user_id, conversation=conversation, message=message)
            written.append(row.file.name)
            stored.append(row)
        added = len(fresh) + len(files.prepared)
        if added:
            ConversationContext.objects.filter(conversation=conversation).update(attachments=F("attachments") + added)
    except BaseException:
        discard(written)
        raise
    return stored


def message_files_tokens(files: MessageFiles, conversation: Conversation) -> int:
    """What the files add to their message's stored token count (so the overflow strategies count them)."""
    vision = _vision(conversation)
    tokens = sum(attachment_tokens(row, vision=vision) for row in files.rows)
    tokens += sum(attachment_tokens(_row_for_count(prepared), vision=vision) for prepared in files.prepared)
    return tokens


def _row_for_count(prepared: Prepared) -> Attachment:
    read = prepared.read
    return Attachment(
        name=read.name,
        kind=AttachmentKind(read.kind.value),
        width=read.width,
        height=read.height,
        pages=read.pages,
        from_ocr=read.from_ocr,
        token_count=prepared.text_tokens,
        indexed=prepared.indexed,
    )


# --- what the model is given ---------------------------------------------------------------------------------------

# Not translated on purpose (as memory.overflow's headings): the model reads them, and a message's token count must
# not depend on the language of whoever sent it.
PASSAGES_HEADING = (
    "## Passages of the files shared in this conversation / 本对话中共享文件的相关段落\n"
    "Cite a passage by its mark, e.g. [name p.2]. / 引用时请注明出处标记，如 [name p.2]。"
)


def _heading(attachment: Attachment) -> str:
    if attachment.kind == AttachmentKind.IMAGE:
        if attachment.text.strip():
            return f"[图片/Image {attachment.name}, text read by OCR]"
        return f"[图片/Image {attachment.name}: no text could be read from it]"
    pages = f", {attachment.pages} pages" if attachment.pages else ""
    return f"[文档/Document {attachment.name}{pages}]"


def _indexed_note(attachment: Attachment) -> str:
    pages = f", {attachment.pages} pages" if attachment.pages else ""
    return (
        f"[文档/Document {attachment.name}{pages}: too long to give whole; its passages that bear on the question "
        "are in the system message]"
    )


def attachment_text(attachment: Attachment, *, vision: bool) -> str:
    """What a file adds to its message's text ("" for an image a vision model sees itself)."""
    if attachment.kind == AttachmentKind.IMAGE:
        if vision:
            return ""
        text = attachment.text.strip()
        return f"{_heading(attachment)}\n{text}" if text else _heading(attachment)
    if attachment.indexed:
        return _indexed_note(attachment)
    return f"{_heading(attachment)}\n{attachment.text.strip()}"


def image_part(attachment: Attachment, detail: str = images.Detail.AUTO) -> dict[str, Any]:
    """An image as OpenAI's `image_url` content part: a data URL of the image resized for `detail`."""
    with attachment.file.open("rb") as handle:
        data = handle.read()
    resized, _width, _height = images.image_for_model(data, detail)
    content_type = "image/png" if resized.startswith(b"\x89PNG") else "image/jpeg"
    url = f"data:{content_type};base64,{base64.b64encode(resized).decode('ascii')}"
    return {"type": "image_url", "image_url": {"url": url, "detail": str(detail)}}


@dataclass(frozen=True)
class Passage:
    attachment_id: int
    name: str
    page: int | None
    position: int
    text: str

    @property
    def mark(self) -> str:
        return f"[{self.name} p.{self.page}]" if self.page else f"[{self.name} §{self.position + 1}]"

    def line(self) -> str:
        return f"{self.mark} {self.text}"


def passages_block(passages: Sequence[Passage]) -> str:
    """The system message's part for the turn's passages ("" when there are none)."""
    if not passages:
        return ""
    return PASSAGES_HEADING + "\n" + "\n\n".join(passage.line() for passage in passages)


def conversation_files(conversation: Conversation) -> list[Attachment]:
    """The conversation's sent files, without their text (read only for those a turn sends)."""
    return list(
        Attachment.objects.filter(conversation=conversation, message__isnull=False).defer("text").order_by("id")
    )


def passages_for(conversation: Conversation, files: Sequence[Attachment], query: str) -> list[Passage]:
    """The best ATTACHMENT_PASSAGES passages of the conversation's indexed documents for `query`: BM25 and the
    multilingual model's cosine, fused as the knowledge bases fuse them (knowledge.ranking.fuse_zscore)."""
    indexed = {row.pk: row for row in files if row.indexed}
    top = setting("ATTACHMENT_PASSAGES")
    if not indexed or top <= 0:
        return []
    rows = list(
        AttachmentPassage.objects.filter(attachment_id__in=list(indexed)).values_list(
            "id", "attachment_id", "page", "position", "text", "terms", "embedding", "embedder"
        )
    )
    if not rows:
        return []
    ids = [row[0] for row in rows]
    rankings = [_keyword_ranking(ids, [row[5] for row in rows], query)]
    vector = _vector_ranking(ids, [(row[6], row[7]) for row in rows], query)
    if vector is not None:
        rankings.append(vector)
    fused = fuse_zscore(rankings)
    if not fused:
        # Nothing matches: the documents' beginnings (a title, an abstract) rather than nothing.
        fused = {row[0]: -float(index) for index, row in enumerate(sorted(rows, key=lambda r: (r[1], r[3])))}
    best = sorted(fused, key=lambda pk: (-fused[pk], pk))[:top]
    by_id = {row[0]: row for row in rows}
    chosen = sorted((by_id[pk] for pk in best), key=lambda row: (row[1], row[3]))
    return [
        Passage(attachment_id=row[1], name=indexed[row[1]].name, page=row[2], position=row[3], text=row[4])
        for row in chosen
    ]


def _keyword_ranking(ids: list[int], terms: list[str], query: str) -> Ranking:
    index = BM25Index(ids, terms)
    hits = index.search(query, CANDIDATES)
    return Ranking("keyword", 1.0, [int(pk) for pk in hits.ids], [float(score) for score in hits.scores])


def _vector_ranking(ids: list[int], stored: list[tuple[Any, str]], query: str) -> Ranking | None:
    try:
        model = local_embedder(EMBEDDER)
        signature = model.signature()
        usable = [
            (pk, vector) for pk, (vector, embedder) in zip(ids, stored, strict=True) if vector and embedder == signature
        ]
        if not usable or not query.strip():
            return None
        matrix = np.asarray([vector for _pk, vector in usable], dtype=np.float32)
        scores = matrix @ model.embed([query], query=True)[0]
    except EmbedderError:
        logger.warning("attachment passages ranked by keyword only", exc_info=True)
        return None
    order = np.argsort(-scores, kind="stable")[:CANDIDATES]
    return Ranking(
        "vector",
        1.0,
        [int(usable[row][0]) for row in order],
        [float(scores[row]) for row in order],
        floor=float(scores[order[-1]]),
    )


@dataclass(frozen=True)
class FilesInTurn:
    """What a turn gives the model of the conversation's files: each window message's files, and the passages of
    the indexed documents (whether their message is in the window or not). `kept` are the files sent with their
    messages, `left` those whose messages left the window (their passages still reach the model)."""

    additions: dict[int, Addition] = field(default_factory=dict)
    passages: tuple[Passage, ...] = ()
    kept: tuple[int, ...] = ()
    left: tuple[int, ...] = ()

    @property
    def block(self) -> str:
        return passages_block(self.passages)


def files_for_turn(*, conversation: Conversation, files: Sequence[Attachment]) -> FilesInTurn:
    """The passages of the turn, for the newest user messages (before the window is chosen: they are part of the
    system message, counted in its fixed tokens)."""
    if not any(row.indexed for row in files):
        return FilesInTurn()
    return FilesInTurn(passages=tuple(passages_for(conversation, files, recent_user_text(conversation))))


def files_for_window(
    *, conversation: Conversation, files: Sequence[Attachment], message_ids: Iterable[int], turn: FilesInTurn
) -> FilesInTurn:
    """`turn` with the window's messages' files as the conversation's model is given them (overflow.Addition)."""
    in_window = set(message_ids)
    kept = [row for row in files if row.message_id in in_window]
    left = tuple(row.pk for row in files if row.message_id not in in_window)
    if not kept:
        return FilesInTurn(passages=turn.passages, left=left)
    vision = _vision(conversation)
    wanted = [row.pk for row in kept if _needs_text(row, vision)]
    texts = dict(Attachment.objects.filter(pk__in=wanted).values_list("pk", "text")) if wanted else {}
    additions: dict[int, Addition] = {}
    for row in kept:
        if row.pk in texts:
            row.text = texts[row.pk]
        previous = additions.get(row.message_id, Addition())
        additions[row.message_id] = _added(previous, row, vision=vision, has_text=row.pk in texts)
    return FilesInTurn(additions=additions, passages=turn.passages, kept=tuple(row.pk for row in kept), left=left)


def _added(previous: Addition, row: Attachment, *, vision: bool, has_text: bool) -> Addition:
    """`previous` with one more file of the message."""
    text, parts = previous.text, previous.parts
    addition = attachment_text(row, vision=vision) if has_text or row.indexed else ""
    if row.kind == AttachmentKind.IMAGE and vision:
        try:
            parts = (*parts, image_part(row))
        except (OSError, images.ImageRefused):
            logger.warning("attachment %s could not be read for the model", row.pk, exc_info=True)
            addition = f"[图片/Image {row.name}: the file could not be read]"
    if addition:
        text = f"{text}\n\n{addition}" if text else addition
    return Addition(text=text, parts=parts)


def _needs_text(row: Attachment, vision: bool) -> bool:
    if row.kind == AttachmentKind.IMAGE:
        return not vision
    return not row.indexed


def recent_user_text(conversation: Conversation, count: int = 2) -> str:
    """The query of a turn's passages: the newest user messages' text, newest first."""
    texts = (
        Message.objects.filter(conversation=conversation, role=Role.USER)
        .order_by("-id")
        .values_list("content", flat=True)[:count]
    )
    return "\n".join(text for text in texts if text)


# An upload never sent with a message is kept this long (the page that uploaded it may still send it).
UNSENT_KEPT = dt.timedelta(days=1)


def attachments_delete_expired(now: dt.datetime | None = None) -> int:
    """Delete every tenant's files past ATTACHMENT_RETENTION_DAYS (0: none), and uploads never sent after
    UNSENT_KEPT; their files leave the storage as each deletion commits. Returns how many rows were deleted."""
    now = now or timezone.now()
    expired = Q(message__isnull=True, created_at__lt=now - UNSENT_KEPT)
    days = setting("ATTACHMENT_RETENTION_DAYS")
    if days > 0:
        expired |= Q(created_at__lt=now - dt.timedelta(days=days))
    deleted = 0
    with all_tenants(reason="the retention of conversations' files, every tenant"):
        while True:
            batch = list(Attachment.objects.filter(expired).values_list("pk", flat=True)[:500])
            if not batch:
                return deleted
            with transaction.atomic():
                deleted += Attachment.objects.filter(pk__in=batch).delete()[1].get(Attachment._meta.label, 0)
