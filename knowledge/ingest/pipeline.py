"""The work on a batch of documents: read and parse each file, cut it into chunks, embed the chunk texts in batches
(the whole at once, or a share until a deadline on a worker), then store (knowledge.ingest.store). One knowledge
base, one embedder, one write at the end; each document keeps its own outcome."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from django.utils import translation
from django.utils.translation import gettext as _

from core.conf import setting
from knowledge.chunking import ChunkDraft, chunk_sections
from knowledge.embedders import Embedder, embedder_for
from knowledge.ingest.claim import Member, claim_again, drop_unwanted
from knowledge.ingest.progress import PROGRESS_SECONDS, STAGE_START, IngestError, Progress, embed_percent, mark_failed
from knowledge.ingest.shares import (
    Restart,
    ShareTaken,
    forget,
    keep_drafts,
    keep_vectors,
    kept_members,
    kept_shares,
    kept_vectors,
)
from knowledge.ingest.store import store_batch
from knowledge.keyword import terms_for
from knowledge.models import Document, IngestStage, KnowledgeBase
from knowledge.parsing import ParseError, over_limit, parse_document

logger = logging.getLogger(__name__)

# Texts per embedder call: progress is written after each call. Texts are sorted by length first, so each call
# (and the embedder's own smaller batches) pads little.
EMBED_BATCH = 64
# The outcome of a share after which the ingestion goes on in another task (the run is passed on).
CONTINUE = "continue"
# The outcome of a delivery whose run another delivery of the same task finished or is doing (a worker died after it
# queued the next share but before the broker heard that this one was done).
DUPLICATE = "duplicate"


class IngestCancelled(Exception):
    """Every document of the batch was deleted, replaced or queued again while it was ingested: the work stops
    (nothing is stored)."""


class _Done(Exception):
    """The batch is stored (leaves `Batch.go`'s stages early)."""


class ShareResult(NamedTuple):
    """What one share did: its outcome (the first document's, or CONTINUE); for CONTINUE the run, the document whose
    task goes on with it and the batch's documents (so the run survives the loss of that document); at the end, the
    queued documents the batch took along."""

    outcome: str
    run: str = ""
    document_id: int = 0
    documents: tuple[int, ...] = ()


def restart(documents: Sequence[int], deadline: float | None, *, lead: str) -> ShareResult:
    """The run's first document is gone with the run's shares: the run's other documents still being ingested
    start again under a new run (at most a batch of small documents is embedded twice)."""
    claimed = claim_again(documents)
    if claimed is None:
        return ShareResult(lead)
    members, knowledge_base_id = claimed
    batch = Batch(KnowledgeBase.objects.get(pk=knowledge_base_id), members, run=uuid.uuid4().hex)
    logger.info("a batch's first document is gone; %s other documents start again", len(members))
    result = batch.go(deadline)
    return result if result.outcome == CONTINUE else ShareResult(lead)


class Batch:
    """The documents ingested together: one knowledge base, one embedder, one write at the end."""

    def __init__(self, knowledge_base: KnowledgeBase, members: list[Member], *, run: str, parsed: bool = False):
        self.knowledge_base = knowledge_base
        self.members = members
        self.lead = members[0]
        self.run = run
        self.parsed = parsed
        self.progress = Progress(members, stage=IngestStage.EMBED if parsed else IngestStage.PARSE)
        self.started = time.perf_counter()
        self.checked = time.monotonic()

    @classmethod
    def resumed(cls, knowledge_base: KnowledgeBase, document: Document, run: str) -> Batch | None:
        """The batch of a run from its first share (None when the run is done: its shares are cleared)."""
        members = kept_members(document, run)
        return None if members is None else cls(knowledge_base, members, run=run, parsed=True)

    @property
    def live(self) -> list[Member]:
        return [member for member in self.members if not member.outcome]

    def go(self, deadline: float | None) -> ShareResult:
        """Take the batch as far as `deadline` allows (None: to the end); the outcome, or CONTINUE."""
        try:
            if deadline is None and not self.parsed and len(self.members) > 1:
                embedder = embedder_for(self.knowledge_base)
                vectors, terms_list = self._stream(embedder)
                if not self.live:
                    raise IngestCancelled
                store_batch(self.knowledge_base, self.members, embedder, vectors, terms_list, self.progress)
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
            terms_list = terms.result() if terms is not None else self._terms()
            store_batch(self.knowledge_base, self.members, embedder, vectors, terms_list, self.progress)
        except ShareTaken:
            return ShareResult(DUPLICATE)
        except Restart:
            forget(self.run)
            return restart([member.pk for member in self.live], deadline, lead=self.lead.outcome or "gone")
        except (IngestCancelled, _Done):
            pass
        except Exception as exc:  # the batch as a whole failed (the database, a bug): every document still in it
            for member in self.live:
                self._fail(member, exc)
        forget(self.run)
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

    # --- read and cut --------------------------------------------------------------------------------------------

    def _parse(self) -> None:
        """Read and parse each document, then cut it into chunks; one that fails leaves the batch with its reason.
        On a worker the chunks are kept as the run's first share."""
        parsed = []
        for member in self.members:
            try:
                parsed.append((member, _sections(member)))
            except Exception as exc:
                self._fail(member, exc)
        self.progress.set(IngestStage.CHUNK, STAGE_START[IngestStage.CHUNK])
        for member, sections in parsed:
            try:
                member.drafts = _cut(self.knowledge_base, sections)
            except Exception as exc:
                self._fail(member, exc)
        if self.run and self.live:
            keep_drafts(tenant_id=self.knowledge_base.tenant_id, run=self.run, lead=self.lead, members=self.live)
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
        owners: list[Member] = []
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
                    self.progress.set(IngestStage.EMBED, embed_percent(number, len(self.members)))
        finally:
            stop.set()
        return rows.matrix(len(texts)), terms

    def _cut_all(self, results: queue.Queue, stop: threading.Event) -> None:
        """Each document's chunks and terms, or the exception it failed with, onto `results`, in order."""
        for member in self.members:
            if stop.is_set():
                return
            try:
                drafts = _cut(self.knowledge_base, _sections(member))
                results.put((member, drafts, [" ".join(terms_for(draft.text)) for draft in drafts], None))
            except Exception as exc:
                results.put((member, [], [], exc))

    def _texts(self) -> tuple[list[str], list[Member], list[int]]:
        """Every chunk text of the batch, the document each belongs to, and the order they are embedded in
        (shortest first, so each call, and the embedder's own smaller batches, pad little)."""
        texts: list[str] = []
        owners: list[Member] = []
        for member in self.members:
            texts.extend(draft.text for draft in member.drafts)
            owners.extend([member] * len(member.drafts))
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        return texts, owners, order

    def _terms(self) -> list[str]:
        """Every chunk text's keyword terms (in `_texts` order), as stored for BM25."""
        return [" ".join(terms_for(draft.text)) for member in self.members for draft in member.drafts]

    # --- embed ---------------------------------------------------------------------------------------------------

    def _embed_all(self, embedder: Embedder) -> np.ndarray:
        """Every text's embedding at once (rows in `_texts` order; rows of documents that left stay zero)."""
        texts, owners, order = self._texts()
        rows = _Rows()
        for start in range(0, len(order), EMBED_BATCH):
            if start:
                self._check()
            self._embed_into(embedder, rows, texts, owners, order[start : start + EMBED_BATCH])
            self.progress.set(IngestStage.EMBED, embed_percent(min(start + EMBED_BATCH, len(order)), len(order)))
        return rows.matrix(len(texts))

    def _embed_share(self, embedder: Embedder, deadline: float) -> np.ndarray | None:
        """Embed the run's next texts until `deadline` (at least one batch) and keep them as the next share; None
        while texts remain, else every text's embedding from the run's shares. ShareTaken when another delivery of
        the run stored this share first."""
        texts, owners, order = self._texts()
        shares = kept_shares(self.run)
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
                self.progress.set(IngestStage.EMBED, embed_percent(position, len(order)))
            block = rows.matrix(len(texts))[order[done:position]]
            number = shares[-1][0] + 1 if shares else 1
            tenant_id = self.knowledge_base.tenant_id
            keep_vectors(tenant_id=tenant_id, run=self.run, lead=self.lead, number=number, start=done, block=block)
            if position < len(order):
                return None
            shares.append((number, done, len(block)))
        return kept_vectors(self.run, shares, order, len(texts))

    def _embed_into(
        self, embedder: Embedder, rows: _Rows, texts: list[str], owners: list[Member], batch: list[int]
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

    # --- whose documents, and how they end -----------------------------------------------------------------------

    def _check(self) -> None:
        """Drop the documents deleted, replaced or queued again since the batch began (one query; for a batch of
        several documents at most every PROGRESS_SECONDS, the write re-checks them anyway); IngestCancelled when
        none is left."""
        now = time.monotonic()
        if len(self.members) > 1 and now - self.checked < PROGRESS_SECONDS:
            return
        self.checked = now
        drop_unwanted(self.live)
        if not self.live:
            raise IngestCancelled

    def _fail(self, member: Member, exc: BaseException, *, stage: str | None = None) -> None:
        """Mark one document failed (it leaves the batch); `stage`: where it failed, when not where the batch is."""
        mark_failed(member, exc, stage=stage or self.progress.current)


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


def _sections(member: Member) -> list:
    return parse_document(_read(Document(file=member.file)), member.file_type)


def _cut(knowledge_base: KnowledgeBase, sections: list) -> list[ChunkDraft]:
    drafts = chunk_sections(sections, chunk_size=knowledge_base.chunk_size, chunk_overlap=knowledge_base.chunk_overlap)
    if not drafts:
        raise ParseError(_("No text was found in the file."))
    if len(drafts) > setting("KNOWLEDGE_MAX_CHUNKS"):
        raise over_limit(_("%(count)s chunks") % {"count": f"{len(drafts):,}"}, "KNOWLEDGE_MAX_CHUNKS")
    return drafts


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
