"""What the documents page shows of an ingestion: each document's stage and percentage as the work goes (one UPDATE
of the batch's rows, only when the whole percentage changes), and on a document that failed, the reason."""

from __future__ import annotations

import logging
import time

from django.utils import timezone
from django.utils.translation import gettext as _

from knowledge.embedders import EmbedderError
from knowledge.ingest.claim import Member
from knowledge.models import Document, DocumentStatus, IngestStage
from knowledge.parsing import ParseError

logger = logging.getLogger(__name__)

# Where each stage starts, in percent; embedding fills the span up to the index stage.
STAGE_START = {IngestStage.PARSE: 0, IngestStage.CHUNK: 10, IngestStage.EMBED: 20, IngestStage.INDEX: 90}
# A batch of several documents writes their progress, and checks whether they are still wanted, at most this often
# (a write updates every row of the batch; a check reads them all).
PROGRESS_SECONDS = 1.0


class IngestError(Exception):
    """A stage failed for a reason the user can act on; the message goes on the document's row."""


class Progress:
    """Writes the stage and progress of the batch's documents still being ingested, only when they change, and for
    a batch of several documents at most every PROGRESS_SECONDS (each write touches every row of the batch)."""

    def __init__(self, members: list[Member], *, stage: str) -> None:
        self.members = members
        self.stage: str | None = stage  # as written
        self.current: str | None = stage  # where the work is (written or not)
        self.percent = STAGE_START[stage]
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


def embed_percent(done: int, total: int) -> float:
    """Progress once `done` of `total` texts are embedded: from the embed stage's start to the index stage's."""
    start, end = STAGE_START[IngestStage.EMBED], STAGE_START[IngestStage.INDEX]
    return start + (end - start) * done / total


def mark_failed(member: Member, exc: BaseException, *, stage: str | None) -> None:
    """Mark one document failed with the reason for its row (an unexpected error: its type, the traceback goes to
    the log); it leaves the batch. `stage`: where it failed."""
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
