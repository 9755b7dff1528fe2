"""Ingestion of documents (K2): parse -> chunk -> embed in batches -> write chunks -> index.

`document_ingest(document_id=...)` runs every stage synchronously inside the document's tenant scope; the benchmark
and the demo data call it. A queued document (the task, `ingest_queued_in_scope` and `ingest_share`) takes the small
documents queued after it in its knowledge base along (`claim`: up to BATCH_DOCUMENTS of at most SMALL_DOCUMENT_BYTES,
BATCH_BYTES in all): they are parsed one by one, their chunks embedded in shared batches and written with one
bulk insert, their rows marked in one statement and the knowledge base's revision bumped once, so a thousand short
uploads cost what their embeddings cost, not a thousand rounds of bookkeeping. Their own tasks find them taken and
return at once (TAKEN). On a Celery worker, `ingest_share` does the work in shares of about
KNOWLEDGE_INGEST_SLICE_SECONDS of embedding, each a task that keeps what it computed (`IngestShare` rows) and queues
the next one behind whatever else waits: one worker goes round the documents of every tenant, so a tenant's big
document (or a batch of small ones) never holds back another tenant's small one. Progress is written as it goes (one
UPDATE of the stage, progress and updated_at columns of the batch's documents, only when the whole percentage
changes):

    parse 0-10 %, chunk 10-20 %, embed 20-90 % (batch by batch), index 90-100 %.

The new chunks replace the old ones in one transaction at the end, so search keeps answering from the old chunks
while a document is re-ingested. Each document keeps its own outcome: one that fails (parse, limits, its texts'
embeddings) is marked failed with a message for its row (the traceback goes to the log only) and leaves the batch,
its previous chunks, if any, staying searchable; one deleted, replaced or queued again meanwhile leaves the batch
unstored; the others go on.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge.chunking import ChunkDraft, chunk_sections
from knowledge.embedders import Embedder, EmbedderError, embedder_for
from knowledge.keyword import terms_for
from knowledge.models import Chunk, Document, DocumentStatus, IngestShare, IngestStage, KnowledgeBase
from knowledge.parsing import ParseError, over_limit, parse_document
from tenants.models import Tenant
from tenants.scope import all_tenants, tenant_scope

logger = logging.getLogger(__name__)

# Where each stage starts, in percent; embedding fills the span up to the index stage.
STAGE_START = {IngestStage.PARSE: 0, IngestStage.CHUNK: 10, IngestStage.EMBED: 20, IngestStage.INDEX: 90}
# Texts per embedder call: progress is written after each call. Texts are sorted by length first, so each call
# (and the embedder's own smaller batches) pads little.
EMBED_BATCH = 64
WRITE_BATCH = 500
# A queued document of at most SMALL_DOCUMENT_BYTES takes the small documents queued after it in its knowledge base
# along, up to BATCH_DOCUMENTS and BATCH_BYTES in all (about 6 s of the local model's embedding at most, so the first
# of them is not kept waiting long, and a second worker finds the next ones still queued).
SMALL_DOCUMENT_BYTES = 64 * 1024
BATCH_DOCUMENTS = 200
BATCH_BYTES = 256 * 1024
# A batch of several documents writes their progress, and checks whether they are still wanted, at most this often
# (a write updates every row of the batch; a check reads them all).
PROGRESS_SECONDS = 1.0
# The outcome of a share after which the ingestion goes on in another task (the run is passed on).
CONTINUE = "continue"
# The outcome of a delivery whose run another delivery of the same task finished or is doing (a worker died after it
# queued the next share but before the broker heard that this one was done).
DUPLICATE = "duplicate"
# The outcome of a queued document's task when another ingestion took the document along (or is ingesting it).
TAKEN = "taken"


class IngestError(Exception):
    """A stage failed for a reason the user can act on; the message goes on the document's row."""


class IngestCancelled(Exception):
    """Every document of the batch was deleted, replaced or queued again while it was ingested: the work stops
    (nothing is stored)."""


class ShareTaken(Exception):
    """Another delivery of the same run stored this share first: it goes on from there, this one stops."""


class Restart(Exception):
    """The document that names a run on the queue left it between shares (deleted, taking the run's shares with it):
    the documents still in the batch start again under a new run."""


class ShareResult(NamedTuple):
    """What one share did: its outcome (the first document's, or CONTINUE); for CONTINUE the run, the document whose
    task goes on with it and the batch's documents (so the run survives the loss of that document); at the end, the
    queued documents the batch took along."""

    outcome: str
    run: str = ""
    document_id: int = 0
    documents: tuple[int, ...] = ()


@dataclass(eq=False)  # compared and hashed by identity
class _Member:
    """A document of a batch, with the chunks it was cut into; `outcome` is set when it leaves the batch."""

    pk: int
    name: str
    file: str
    file_type: str = ""
    drafts: list[ChunkDraft] = field(default_factory=list)
    outcome: str = ""
    queued: bool = False  # taken from the queue (its own task is still to come, and will find it taken)


class _Progress:
    """Writes the stage and progress of the batch's documents still being ingested, only when they change, and for
    a batch of several documents at most every PROGRESS_SECONDS (each write touches every row of the batch)."""

    def __init__(self, members: list[_Member]) -> None:
        self.members = members
        self.stage: str | None = None  # as written
        self.current: str | None = None  # where the work is (written or not)
        self.percent = -1
        self.written = time.monotonic()

    def set(self, stage: str, percent: float) -> None:
        self.current = stage
        percent = max(0, min(99, int(percent)))  # 100 is written with the chunks, never before
        if stage == self.stage and percent == self.percent:
            return
        now = time.monotonic()
        if len(self.members) > 1 and now - self.written < PROGRESS_SECONDS:
            return
        fields = {"progress": percent, "updated_at": timezone.now()}
        if stage != self.stage:
            fields["stage"] = stage
        live = [member.pk for member in self.members if not member.outcome]
        if live:
            Document.objects.filter(pk__in=live, status=DocumentStatus.PROCESSING).update(**fields)
        self.stage, self.percent, self.written = stage, percent, now


def document_ingest(*, document_id: int) -> str:
    """Ingest a document of any tenant (its scope is entered here); returns the outcome: "ready", "failed",
    "gone" (deleted meanwhile) or "superseded" (its file was replaced meanwhile; the newer ingestion wins)."""
    with all_tenants(reason="knowledge ingestion: find the tenant of the document to ingest"):
        tenant_id = Document.objects.filter(pk=document_id).values_list("tenant_id", flat=True).first()
    tenant = Tenant.objects.filter(pk=tenant_id).first() if tenant_id is not None else None
    if tenant is None:
        logger.info("document %s is gone; nothing to ingest", document_id)
        return "gone"
    with tenant_scope(tenant):
        return ingest_in_scope(document_id=document_id)


def ingest_in_scope(*, document_id: int) -> str:
    """`document_ingest` inside the tenant scope that is already active: this document alone, whatever its status,
    the whole of it at once."""
    return _ingest(document_id=document_id, run="", deadline=None, queued=False).outcome


def ingest_queued_in_scope(*, document_id: int, taken: list[int] | None = None) -> str:
    """A queued document's ingestion, whole, with the small documents queued after it in its knowledge base (what
    the task does when called directly, eagerly or with KNOWLEDGE_INGEST_SLICE_SECONDS=0): the outcome of this one,
    or TAKEN when another ingestion took it along. The ids of the queued documents taken along are added to `taken`
    (the embedded default's line then drops their turns)."""
    result = _ingest(document_id=document_id, run="", deadline=None, queued=True)
    if taken is not None:
        taken.extend(result.documents)
    return result.outcome


def queued_is_taken(*, tenant_id: int, document_id: int, on_worker: bool) -> bool:
    """True when a queued document's own task has nothing to do because another ingestion took it along (it is
    ready or failed, or being ingested and not stalled, and on a worker not the first document of a kept run). One
    query (two on a worker for a document being ingested) and no tenant lookup: a batch's documents' own tasks cost
    next to nothing."""
    with all_tenants(reason="knowledge ingestion: is a queued document still waiting (its tenant's, by id)"):
        row = Document.objects.filter(pk=document_id, tenant_id=tenant_id).values_list("status", "updated_at").first()
        if row is None or row[0] == DocumentStatus.PENDING:
            return False
        if row[0] != DocumentStatus.PROCESSING:
            return True
        if row[1] < timezone.now() - _stalled_after():
            return False
        return not (on_worker and IngestShare.objects.filter(document_id=document_id, number=0).exists())


def ingest_share(*, document_id: int, run: str = "", seconds: float) -> tuple[str, str]:
    """One share of a queued document's ingestion (a Celery task's, inside the tenant scope): the first share takes
    the small documents queued after it along, parses and cuts them; every share embeds for about `seconds` (at
    least one batch) and keeps what it computed; the share that embeds the last text stores the chunks. Returns
    (outcome, run): CONTINUE and the run to give the next share, or the outcome of `document_ingest` (or DUPLICATE,
    TAKEN) and ""."""
    result = ingest_next_share(document_id=document_id, run=run, seconds=seconds)
    return result.outcome, result.run


def ingest_next_share(*, document_id: int, run: str = "", seconds: float, documents: Sequence[int] = ()) -> ShareResult:
    """`ingest_share` as the task calls it: `documents` are the run's documents as the previous share returned them,
    so that the run goes on (from the start) if the document naming it was deleted meanwhile."""
    return _ingest(
        document_id=document_id, run=run, deadline=time.monotonic() + seconds, queued=True, documents=documents
    )


def _ingest(
    *, document_id: int, run: str, deadline: float | None, queued: bool, documents: Sequence[int] = ()
) -> ShareResult:
    document = Document.objects.select_related("knowledge_base").filter(pk=document_id).first()
    if document is None:
        if run and documents:
            return _restart(documents, deadline, lead="gone")
        return ShareResult("gone")
    knowledge_base = document.knowledge_base
    if not run and queued and document.status != DocumentStatus.PENDING:
        if document.status != DocumentStatus.PROCESSING:
            return ShareResult(TAKEN)  # another ingestion took it along and is done
        kept = _kept_run(document.pk) if deadline is not None else None
        if kept is not None:
            run = kept  # a delivery of a first share again (the worker died): go on from what it kept
        elif document.updated_at >= timezone.now() - _stalled_after():
            return ShareResult(TAKEN)  # another ingestion is at work on it
    if run:
        batch = _Batch.resumed(knowledge_base, document, run)
        if batch is None:
            return ShareResult(DUPLICATE)  # another delivery of this run stored the chunks and cleared the shares
    else:
        members = _claim(document, take_queued=queued)
        if not members:
            return ShareResult(TAKEN)
        batch = _Batch(knowledge_base, members, run=uuid.uuid4().hex if deadline is not None else "")
    return batch.go(deadline)


def _restart(documents: Sequence[int], deadline: float | None, *, lead: str) -> ShareResult:
    """The run's first document is gone with the run's shares: the run's other documents still being ingested
    start again under a new run (at most a batch of small documents is embedded twice)."""
    claimed = _claim_again(documents)
    if claimed is None:
        return ShareResult(lead)
    members, knowledge_base_id = claimed
    batch = _Batch(KnowledgeBase.objects.get(pk=knowledge_base_id), members, run=uuid.uuid4().hex)
    logger.info("a batch's first document is gone; %s other documents start again", len(members))
    result = batch.go(deadline)
    return result if result.outcome == CONTINUE else ShareResult(lead)


def _stalled_after() -> dt.timedelta:
    return dt.timedelta(seconds=float(setting("KNOWLEDGE_STALLED_AFTER_SECONDS")))


def _kept_run(document_id: int) -> str | None:
    return (
        IngestShare.objects.filter(document_id=document_id, number=0)
        .order_by("-created_at", "-id")
        .values_list("run", flat=True)
        .first()
    )


def _claim(document: Document, *, take_queued: bool) -> list[_Member]:
    """Mark the document being ingested (if it is still this task's to do) and, for a queued small document, the
    small documents queued after it in its knowledge base (documents another worker is claiming are skipped, rows
    left by a worker that died mid-way are taken again); the batch's members, this document first."""
    now = timezone.now()
    fields = {"status": DocumentStatus.PROCESSING, "stage": IngestStage.PARSE, "progress": 0, "error": ""}
    with transaction.atomic():
        mine = Document.objects.filter(pk=document.pk)
        if take_queued:
            mine = mine.filter(_claimable(now))
        if not mine.update(**fields, updated_at=now):
            return []
        members = [_Member(document.pk, document.name, document.file.name, document.file_type)]
        if not take_queued or document.size > SMALL_DOCUMENT_BYTES:
            return members
        candidates = (
            Document.objects.select_for_update(skip_locked=True)
            .filter(_claimable(now), knowledge_base_id=document.knowledge_base_id, size__lte=SMALL_DOCUMENT_BYTES)
            .exclude(pk=document.pk)
            .order_by("pk")
            .values_list("pk", "name", "file", "file_type", "size", "status")[: BATCH_DOCUMENTS - 1]
        )
        total = document.size
        for pk, name, file_name, file_type, size, status in candidates:
            if total + size > BATCH_BYTES:
                break
            total += size
            members.append(_Member(pk, name, file_name, file_type, queued=status == DocumentStatus.PENDING))
        if len(members) > 1:
            Document.objects.filter(pk__in=[member.pk for member in members[1:]]).update(**fields, updated_at=now)
    return members


def _claimable(now: dt.datetime) -> Q:
    """Queued, or left processing with no progress for KNOWLEDGE_STALLED_AFTER_SECONDS (its worker died)."""
    stalled = Q(status=DocumentStatus.PROCESSING, updated_at__lt=now - _stalled_after())
    return Q(status=DocumentStatus.PENDING) | stalled


def _claim_again(documents: Sequence[int]) -> tuple[list[_Member], int] | None:
    """The documents of a lost run that are still being ingested, claimed afresh (stage parse), and their knowledge
    base (a run's documents share one)."""
    rows = list(
        Document.objects.filter(pk__in=list(documents), status=DocumentStatus.PROCESSING)
        .order_by("pk")
        .values_list("pk", "name", "file", "file_type", "knowledge_base_id")
    )
    if not rows:
        return None
    Document.objects.filter(pk__in=[row[0] for row in rows], status=DocumentStatus.PROCESSING).update(
        stage=IngestStage.PARSE, progress=0, updated_at=timezone.now()
    )
    return [_Member(pk, name, file_name, file_type) for pk, name, file_name, file_type, _kb in rows], rows[0][4]


class _Batch:
    """The documents ingested together: one knowledge base, one embedder, one write at the end."""

    def __init__(self, knowledge_base: KnowledgeBase, members: list[_Member], *, run: str, parsed: bool = False):
        self.knowledge_base = knowledge_base
        self.members = members
        self.lead = members[0]
        self.run = run
        self.parsed = parsed
        self.progress = _Progress(members)
        self.started = time.perf_counter()
        self.checked = time.monotonic()
        stage = IngestStage.EMBED if parsed else IngestStage.PARSE
        self.progress.stage = self.progress.current = stage
        self.progress.percent = STAGE_START[stage]

    @classmethod
    def resumed(cls, knowledge_base: KnowledgeBase, document: Document, run: str) -> _Batch | None:
        """The batch of a run from its first share (None when the run is done: its shares are cleared)."""
        first = IngestShare.objects.filter(run=run, number=0).values_list("file", "data").first()
        if first is None:
            return None
        file_name, data = first
        kept = json.loads(bytes(data))
        if isinstance(kept, list):  # a run of one document, kept before batches: the drafts alone
            members = [_Member(document.pk, document.name, file_name, drafts=_drafts_from(kept))]
        else:
            members = [
                _Member(pk, name, stored, drafts=_drafts_from(rows)) for pk, name, stored, rows in kept["documents"]
            ]
        return cls(knowledge_base, members, run=run, parsed=True)

    @property
    def live(self) -> list[_Member]:
        return [member for member in self.members if not member.outcome]

    # --- the stages ----------------------------------------------------------------------------------------------

    def go(self, deadline: float | None) -> ShareResult:
        try:
            if deadline is None and not self.parsed and len(self.members) > 1:
                embedder = embedder_for(self.knowledge_base)
                vectors, terms_list = self._stream(embedder)
                if not self.live:
                    raise IngestCancelled
                self._store(embedder, vectors, terms_list)
                raise _Done
            if not self.parsed:
                self._parse()
            if not self.live:
                raise IngestCancelled
            embedder = embedder_for(self.knowledge_base)
            terms: Future[list[str]] | None = None
            if deadline is None:
                # The keyword terms are cut while the embedder works (its threads leave the interpreter free).
                terms = _helper().submit(self._terms)
                vectors = self._embed_all(embedder)
            else:
                vectors = self._embed_share(embedder, deadline)
                if vectors is None:
                    return self._continue()
            self._store(embedder, vectors, terms.result() if terms is not None else self._terms())
        except ShareTaken:
            return ShareResult(DUPLICATE)
        except Restart:
            self._forget()
            return _restart([member.pk for member in self.live], deadline, lead=self.lead.outcome or "gone")
        except (IngestCancelled, _Done):
            pass
        except Exception as exc:  # the batch as a whole failed (the database, a bug): every document still in it
            for member in self.live:
                self._fail(member, exc)
        self._forget()
        self._log()
        taken = tuple(member.pk for member in self.members[1:] if member.queued)
        return ShareResult(self.lead.outcome or "gone", documents=taken)

    def _continue(self) -> ShareResult:
        elapsed = time.perf_counter() - self.started
        logger.info(
            "document %s (%s)%s: a share of its ingestion in %.2fs",
            self.lead.pk, self.lead.name, self._others(), elapsed,
        )  # fmt: skip
        live = tuple(member.pk for member in self.live)
        return ShareResult(CONTINUE, self.run, self.lead.pk, live)

    def _others(self) -> str:
        return f" and {len(self.members) - 1} more" if len(self.members) > 1 else ""

    def _log(self) -> None:
        elapsed = time.perf_counter() - self.started
        if len(self.members) == 1:
            logger.info("document %s (%s): %s in %.2fs", self.lead.pk, self.lead.name, self.lead.outcome, elapsed)
            return
        counts: dict[str, int] = {}
        for member in self.members:
            counts[member.outcome] = counts.get(member.outcome, 0) + 1
        logger.info(
            "documents %s (%s) and %s more: %s in %.2fs",
            self.lead.pk, self.lead.name, len(self.members) - 1,
            ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items())), elapsed,
        )  # fmt: skip

    def _parse(self) -> None:
        """Read and parse each document, then cut it into chunks; one that fails leaves the batch with its reason.
        On a worker the chunks are kept as the run's first share."""
        parsed = []
        for member in self.members:
            try:
                parsed.append((member, self._sections(member)))
            except Exception as exc:
                self._fail(member, exc)
        self.progress.set(IngestStage.CHUNK, STAGE_START[IngestStage.CHUNK])
        for member, sections in parsed:
            try:
                member.drafts = self._drafts(sections)
            except Exception as exc:
                self._fail(member, exc)
        if self.run and self.live:
            kept = {"documents": [[m.pk, m.name, m.file, _drafts_rows(m.drafts)] for m in self.live]}
            IngestShare.objects.create(
                tenant_id=self.knowledge_base.tenant_id, document_id=self.lead.pk, run=self.run, number=0,
                file=self.lead.file, count=sum(len(m.drafts) for m in self.live),
                data=json.dumps(kept, ensure_ascii=False, separators=(",", ":")).encode(),
            )  # fmt: skip
        self.progress.set(IngestStage.EMBED, STAGE_START[IngestStage.EMBED])

    def _stream(self, embedder: Embedder) -> tuple[np.ndarray, list[str]]:
        """Several documents, whole: a helper thread reads, parses, cuts and segments them one after the other while
        the embedder embeds the texts of those already cut, EMBED_BATCH at a time (on two cores the parsing then
        takes the room the embedder's threads leave, instead of running alone before them). A document that fails
        there leaves the batch with its reason. The embeddings and the terms, in `_texts` order."""
        results: queue.Queue = queue.Queue()
        stop = threading.Event()

        language = translation.get_language()

        def cut() -> None:  # no database here: the helper thread has no tenant scope, nor the caller's transaction
            with translation.override(language):  # the caller's language for the error messages
                self._cut_all(results, stop)

        rows = _Rows()
        texts: list[str] = []
        owners: list[_Member] = []
        terms: list[str] = []
        pending: list[int] = []
        self.progress.set(IngestStage.EMBED, STAGE_START[IngestStage.EMBED])
        _helper().submit(cut)
        try:
            for number in range(1, len(self.members) + 1):
                member, drafts, member_terms, exc = results.get()
                if exc is not None and not member.outcome:
                    self._fail(member, exc, stage=IngestStage.PARSE)
                elif exc is None:
                    member.drafts = drafts
                    pending.extend(range(len(texts), len(texts) + len(drafts)))
                    texts.extend(draft.text for draft in drafts)
                    owners.extend([member] * len(drafts))
                    terms.extend(member_terms)
                while len(pending) >= EMBED_BATCH or (pending and number == len(self.members)):
                    self._check()
                    batch, pending = pending[:EMBED_BATCH], pending[EMBED_BATCH:]
                    self._embed_into(embedder, rows, texts, owners, batch)
                    self.progress.set(IngestStage.EMBED, _embed_percent(number, len(self.members)))
        finally:
            stop.set()
        return rows.matrix(len(texts)), terms

    def _cut_all(self, results: queue.Queue, stop: threading.Event) -> None:
        """Each document's chunks and terms, or the exception it failed with, onto `results`, in order."""
        for member in self.members:
            if stop.is_set():
                return
            try:
                drafts = self._drafts(self._sections(member))
                results.put((member, drafts, [" ".join(terms_for(draft.text)) for draft in drafts], None))
            except Exception as exc:
                results.put((member, [], [], exc))

    def _sections(self, member: _Member) -> list:
        return parse_document(_read(Document(file=member.file)), member.file_type)

    def _drafts(self, sections: list) -> list[ChunkDraft]:
        knowledge_base = self.knowledge_base
        drafts = chunk_sections(
            sections, chunk_size=knowledge_base.chunk_size, chunk_overlap=knowledge_base.chunk_overlap
        )
        if not drafts:
            raise ParseError(_("No text was found in the file."))
        if len(drafts) > setting("KNOWLEDGE_MAX_CHUNKS"):
            raise over_limit(_("%(count)s chunks") % {"count": f"{len(drafts):,}"}, "KNOWLEDGE_MAX_CHUNKS")
        return drafts

    def _texts(self) -> tuple[list[str], list[_Member], list[int]]:
        """Every chunk text of the batch, the document each belongs to, and the order they are embedded in
        (shortest first, so each call, and the embedder's own smaller batches, pad little)."""
        texts: list[str] = []
        owners: list[_Member] = []
        for member in self.members:
            texts.extend(draft.text for draft in member.drafts)
            owners.extend([member] * len(member.drafts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        return texts, owners, order

    def _embed_all(self, embedder: Embedder) -> np.ndarray:
        """Every text's embedding at once (rows in `_texts` order; rows of documents that left stay zero)."""
        texts, owners, order = self._texts()
        rows = _Rows()
        for start in range(0, len(order), EMBED_BATCH):
            if start:
                self._check()
            self._embed_into(embedder, rows, texts, owners, order[start : start + EMBED_BATCH])
            self.progress.set(IngestStage.EMBED, _embed_percent(min(start + EMBED_BATCH, len(order)), len(order)))
        return rows.matrix(len(texts))

    def _embed_share(self, embedder: Embedder, deadline: float) -> np.ndarray | None:
        """Embed the run's next texts until `deadline` (at least one batch) and keep them as the next share; None
        while texts remain, else every text's embedding from the run's shares. ShareTaken when another delivery of
        the run stored this share first."""
        texts, owners, order = self._texts()
        run = self.run
        shares = list(
            IngestShare.objects.filter(run=run, number__gt=0).order_by("number").values_list("number", "start", "count")
        )
        done = sum(count for _number, _start, count in shares)  # shares follow each other in embedding order
        if done < len(order):
            rows = _Rows()
            position = done
            while position < len(order) and (position == done or time.monotonic() < deadline):
                if position:
                    self._check()
                batch = order[position : position + EMBED_BATCH]
                self._embed_into(embedder, rows, texts, owners, batch)
                position += len(batch)
                self.progress.set(IngestStage.EMBED, _embed_percent(position, len(order)))
            block = rows.matrix(len(texts))[order[done:position]]
            number = shares[-1][0] + 1 if shares else 1
            try:
                with transaction.atomic():
                    IngestShare.objects.create(
                        tenant_id=self.knowledge_base.tenant_id, document_id=self.lead.pk, run=run,
                        file=self.lead.file, number=number, start=done, count=len(block), data=_npy(block),
                    )  # fmt: skip
            except IntegrityError:
                if not Document.objects.filter(pk=self.lead.pk).exists():
                    raise Restart from None  # the first document was deleted: its shares went with it
                raise ShareTaken from None
            if position < len(order):
                return None
            shares.append((number, done, len(block)))
        matrix: np.ndarray | None = None
        for number, start, count in shares:
            vectors = _share_vectors(run, number)
            if not vectors.size:
                continue
            if matrix is None:
                matrix = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            elif vectors.shape[1] != matrix.shape[1]:
                raise IngestError(_("The embedder changed its vector size in the middle of a document."))
            matrix[order[start : start + count]] = vectors
        return matrix if matrix is not None else np.zeros((len(texts), 0), dtype=np.float32)

    def _embed_into(
        self, embedder: Embedder, rows: _Rows, texts: list[str], owners: list[_Member], batch: list[int]
    ) -> None:
        """Embed the texts at `batch` whose documents are still in the batch; when the embedder fails on texts of
        several documents, they are embedded again in halves (by document) until the failing document is found,
        which then fails alone."""
        wanted = [i for i in batch if not owners[i].outcome]
        if not wanted:
            return
        try:
            vectors = _embed_batch(embedder, [texts[i] for i in wanted])
        except Exception as exc:
            members = list(dict.fromkeys(owners[i] for i in wanted))
            if len(members) == 1:
                self._fail(members[0], exc)
                if not self.live:
                    raise IngestCancelled from None
                return
            half = set(members[: len(members) // 2])
            self._embed_into(embedder, rows, texts, owners, [i for i in wanted if owners[i] in half])
            self._embed_into(embedder, rows, texts, owners, [i for i in wanted if owners[i] not in half])
            return
        rows.put(wanted, vectors)

    def _check(self) -> None:
        """Drop the documents deleted, replaced or queued again since the batch began (one query; for a batch of
        several documents at most every PROGRESS_SECONDS, the write re-checks them anyway); IngestCancelled when
        none is left."""
        now = time.monotonic()
        if len(self.members) > 1 and now - self.checked < PROGRESS_SECONDS:
            return
        self.checked = now
        live = self.live
        current = {
            pk: (file_name, status)
            for pk, file_name, status in Document.objects.filter(pk__in=[m.pk for m in live]).values_list(
                "pk", "file", "status"
            )
        }
        for member in live:
            found = current.get(member.pk)
            if found is None:
                member.outcome = "gone"
            elif found != (member.file, DocumentStatus.PROCESSING):
                member.outcome = "superseded"
            if member.outcome:
                logger.info("document %s (%s): deleted or replaced while ingested; stopped", member.pk, member.name)
        if not self.live:
            raise IngestCancelled

    def _terms(self) -> list[str]:
        """Every chunk text's keyword terms (in `_texts` order), as stored for BM25."""
        return [" ".join(terms_for(draft.text)) for member in self.members for draft in member.drafts]

    def _store(self, embedder: Embedder, vectors: np.ndarray, terms: list[str]) -> None:
        """Swap the documents' chunks for the new ones and mark them ready, in one transaction (the documents whose
        file was replaced or that were queued again meanwhile are left to the newer ingestion); then make sure the
        vector index exists."""
        self.progress.set(IngestStage.INDEX, STAGE_START[IngestStage.INDEX])
        dimension = int(vectors.shape[1])
        if not dimension:
            raise IngestError(_("The embedder returned no vectors."))
        tenant_id, knowledge_base_id, model = self.knowledge_base.tenant_id, self.knowledge_base.pk, embedder.model
        chunks: list[tuple[_Member, Chunk]] = []
        row = 0
        for member in self.members:
            for draft in member.drafts:
                if not member.outcome:
                    chunk = Chunk(
                        tenant_id=tenant_id, knowledge_base_id=knowledge_base_id, document_id=member.pk,
                        position=draft.position, text=draft.text, token_count=draft.token_count,
                        embedding=vectors[row], embedding_model=model, embedding_dim=dimension,
                        terms=terms[row], metadata=draft.metadata,
                    )  # fmt: skip
                    chunks.append((member, chunk))
                row += 1
        self.progress.set(IngestStage.INDEX, 95)
        if self._swap(embedder, chunks):
            _ensure_index(dimension)
            _ensure_own_index(self.knowledge_base, dimension)

    @transaction.atomic
    def _swap(self, embedder: Embedder, chunks: list[tuple[_Member, Chunk]]) -> bool:
        live = self.live
        current = dict(
            Document.objects.select_for_update()
            .filter(pk__in=[m.pk for m in live], status=DocumentStatus.PROCESSING)
            .values_list("pk", "file")
        )
        stored = [m for m in live if current.get(m.pk) == m.file]
        for member in live:
            if current.get(member.pk) != member.file:
                member.outcome = "superseded" if member.pk in current or self._exists(member) else "gone"
        if not stored:
            return False
        Chunk.objects.filter(document_id__in=[m.pk for m in stored]).delete()
        Chunk.objects.bulk_create([chunk for member, chunk in chunks if member.outcome == ""], batch_size=WRITE_BATCH)
        now = timezone.now()
        by_count: dict[int, list[int]] = {}  # one UPDATE per chunk count (small documents: a handful)
        for member in stored:
            by_count.setdefault(len(member.drafts), []).append(member.pk)
        for chunk_count, ids in by_count.items():
            Document.objects.filter(pk__in=ids).update(
                status=DocumentStatus.READY,
                stage=IngestStage.DONE,
                progress=100,
                error="",
                chunk_count=chunk_count,
                embedded_with=embedder.signature(),
                ingested_at=now,
                updated_at=now,
            )
        KnowledgeBase.objects.filter(pk=self.knowledge_base.pk).update(revision=F("revision") + 1)
        for member in stored:
            member.outcome = "ready"
        return True

    @staticmethod
    def _exists(member: _Member) -> bool:
        return Document.objects.filter(pk=member.pk).exists()

    def _fail(self, member: _Member, exc: BaseException, *, stage: str | None = None) -> None:
        """Mark one document failed with the reason for its row (an unexpected error: its type, the traceback goes
        to the log); it leaves the batch. `stage`: where it failed, when not where the batch is."""
        stage = stage or self.progress.current
        if isinstance(exc, (ParseError, EmbedderError, IngestError)):
            message = str(exc)
            logger.info("document %s (%s) failed at %s: %s", member.pk, member.name, stage, exc)
        else:
            logger.error("document %s (%s) failed at %s", member.pk, member.name, stage, exc_info=exc)
            label = IngestStage(stage).label if stage else ""
            message = _(
                "Unexpected error while %(stage)s: %(error)s. The details are in the server log; re-ingest to retry."
            ) % {"stage": str(label).lower(), "error": exc.__class__.__name__}
        member.outcome = "failed"
        fields = {"status": DocumentStatus.FAILED, "error": message[:2000], "updated_at": timezone.now()}
        if stage:
            fields["stage"] = stage  # the row says where it stopped
        Document.objects.filter(pk=member.pk).update(**fields)

    def _forget(self) -> None:
        """Drop what the run kept between its shares (it ended)."""
        if self.run:
            IngestShare.objects.filter(run=self.run).delete()


_helpers: ThreadPoolExecutor | None = None
_helpers_lock = threading.Lock()


def _helper() -> ThreadPoolExecutor:
    """Threads for the work done while the embedder runs (one per ingestion thread of the embedded default)."""
    global _helpers
    with _helpers_lock:
        if _helpers is None:
            threads = max(2, int(setting("KNOWLEDGE_INGEST_THREADS")))
            _helpers = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ingest-helper")
        return _helpers


class _Rows:
    """The embeddings of a batch's texts as they come (rows of texts not embedded stay zero)."""

    def __init__(self) -> None:
        self.pieces: list[tuple[list[int], np.ndarray]] = []

    def put(self, indices: list[int], vectors: np.ndarray) -> None:
        if self.pieces and vectors.shape[1] != self.pieces[0][1].shape[1]:
            raise IngestError(_("The embedder changed its vector size in the middle of a document."))
        self.pieces.append((indices, vectors))

    def matrix(self, count: int) -> np.ndarray:
        rows = np.zeros((count, self.pieces[0][1].shape[1] if self.pieces else 0), dtype=np.float32)
        for indices, vectors in self.pieces:
            rows[indices] = vectors
        return rows


class _Done(Exception):
    """The batch is stored (leaves `_Batch.go`'s stages early)."""


def _share_vectors(run: str, number: int) -> np.ndarray:
    data = IngestShare.objects.filter(run=run, number=number).values_list("data", flat=True).get()
    return np.load(io.BytesIO(bytes(data)), allow_pickle=False)


def _npy(vectors: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, vectors.astype(np.float32), allow_pickle=False)
    return out.getvalue()


def _drafts_rows(drafts: list[ChunkDraft]) -> list[list]:
    return [[draft.position, draft.text, draft.token_count, draft.metadata] for draft in drafts]


def _drafts_from(rows: list[list]) -> list[ChunkDraft]:
    return [ChunkDraft(position, text, tokens, metadata) for position, text, tokens, metadata in rows]


def _read(document: Document) -> bytes:
    try:
        with document.file.open("rb") as handle:
            return handle.read()
    except (FileNotFoundError, OSError, ValueError) as exc:
        raise IngestError(_("The uploaded file is missing from storage. Upload it again.")) from exc


def _embed_batch(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """The embeddings of one batch, checked: one finite vector per text."""
    vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] == 0:
        raise IngestError(
            _("The embedder returned %(got)s vectors for %(expected)s texts.")
            % {"got": vectors.shape[0] if vectors.ndim == 2 else 0, "expected": len(texts)}
        )
    if not np.isfinite(vectors).all():
        raise IngestError(_("The embedder returned invalid numbers (NaN or infinity)."))
    return vectors


def _embed_percent(done: int, total: int) -> float:
    """Progress once `done` of `total` texts are embedded: from the embed stage's start to the index stage's."""
    start, end = STAGE_START[IngestStage.EMBED], STAGE_START[IngestStage.INDEX]
    return start + (end - start) * done / total


def _ensure_index(dimension: int) -> None:
    from knowledge import vectorstore

    try:
        with transaction.atomic():  # a savepoint: a failed CREATE INDEX must not break an outer transaction
            vectorstore.ensure_index(dimension)
    except Exception:  # the chunks are stored and searchable (exactly) without the index; the log says why
        logger.exception("could not create the vector index for dimension %s", dimension)


def _ensure_own_index(knowledge_base: KnowledgeBase, dimension: int) -> None:
    """Queue the build of the knowledge base's own HNSW index once it holds KNOWLEDGE_OWN_INDEX_MIN_CHUNKS chunks:
    a task of its own, as the build takes from seconds to minutes and a worker's ingestion shares are kept short."""
    from knowledge import vectorstore
    from knowledge.tasks import build_vector_index

    try:
        if vectorstore.needs_own_index(knowledge_base.pk, dimension):
            build_vector_index.delay(knowledge_base.tenant_id, knowledge_base.pk, dimension)
    except Exception:  # the shared index still serves the knowledge base; the log says why
        logger.exception("could not build the vector index of knowledge base %s", knowledge_base.pk)
