"""What a run keeps between its shares on a Celery worker (`IngestShare` rows): share 0 holds the batch's chunks as
cut (JSON), each later share the embeddings of the texts it embedded (an .npy array), so the next share, or a task
delivered again after its worker died, goes on from there. The run's rows are dropped when it ends."""

from __future__ import annotations

import io
import json

import numpy as np
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from knowledge.chunking import ChunkDraft
from knowledge.ingest.claim import Member
from knowledge.ingest.progress import IngestError
from knowledge.models import Document, IngestShare


class ShareTaken(Exception):
    """Another delivery of the same run stored this share first: it goes on from there, this one stops."""


class Restart(Exception):
    """The document that names a run on the queue left it between shares (deleted, taking the run's shares with it):
    the documents still in the batch start again under a new run."""


def kept_members(document: Document, run: str) -> list[Member] | None:
    """The batch of a run, with its chunks, from its first share (None when the run is done: its shares are
    cleared)."""
    first = IngestShare.objects.filter(run=run, number=0).values_list("file", "data").first()
    if first is None:
        return None
    file_name, data = first
    kept = json.loads(bytes(data))
    if isinstance(kept, list):  # a run of one document, kept before batches: the drafts alone
        return [Member(document.pk, document.name, file_name, drafts=_drafts_from(kept))]
    return [Member(pk, name, stored, drafts=_drafts_from(rows)) for pk, name, stored, rows in kept["documents"]]


def keep_drafts(*, tenant_id: int, run: str, lead: Member, members: list[Member]) -> None:
    """Keep the members' chunks as the run's first share."""
    kept = {"documents": [[m.pk, m.name, m.file, _drafts_rows(m.drafts)] for m in members]}
    IngestShare.objects.create(
        tenant_id=tenant_id, document_id=lead.pk, run=run, number=0, file=lead.file,
        count=sum(len(m.drafts) for m in members),
        data=json.dumps(kept, ensure_ascii=False, separators=(",", ":")).encode(),
    )  # fmt: skip


def kept_shares(run: str) -> list[tuple[int, int, int]]:
    """The run's embedding shares so far: (number, start, count), in embedding order."""
    return list(
        IngestShare.objects.filter(run=run, number__gt=0).order_by("number").values_list("number", "start", "count")
    )


def keep_vectors(*, tenant_id: int, run: str, lead: Member, number: int, start: int, block: np.ndarray) -> None:
    """Keep the embeddings of the texts from `start` (in embedding order) as share `number`. ShareTaken when
    another delivery of the run kept it first; Restart when the run's first document was deleted meanwhile."""
    try:
        with transaction.atomic():
            IngestShare.objects.create(
                tenant_id=tenant_id, document_id=lead.pk, run=run, file=lead.file, number=number, start=start,
                count=len(block), data=_npy(block),
            )  # fmt: skip
    except IntegrityError:
        if not Document.objects.filter(pk=lead.pk).exists():
            raise Restart from None  # the first document was deleted: its shares went with it
        raise ShareTaken from None


def kept_vectors(run: str, shares: list[tuple[int, int, int]], order: list[int], count: int) -> np.ndarray:
    """Every text's embedding from the run's shares (rows in text order; `order` is the embedding order)."""
    matrix: np.ndarray | None = None
    for number, start, share_count in shares:
        vectors = _share_vectors(run, number)
        if not vectors.size:
            continue
        if matrix is None:
            matrix = np.zeros((count, vectors.shape[1]), dtype=np.float32)
        elif vectors.shape[1] != matrix.shape[1]:
            raise IngestError(_("The embedder changed its vector size in the middle of a document."))
        matrix[order[start : start + share_count]] = vectors
    return matrix if matrix is not None else np.zeros((count, 0), dtype=np.float32)


def forget(run: str) -> None:
    """Drop what the run kept between its shares (it ended)."""
    if run:
        IngestShare.objects.filter(run=run).delete()


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
