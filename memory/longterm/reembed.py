"""Embed long-term memory again with the current MEMORY_EMBEDDER: the rows (events, memories, indexed turns) whose
vector came from another model, or from none. Until then such rows are found by keyword only: vector search
compares only vectors of the current model.

Two callers, one loop: `python manage.py reembed_memory` (after an operator changes the setting) and the migration
that made "auto" the default (memory 0018), which moves the Chinese rows an earlier version stored with the English
model. The models are passed in, so the migration can hand over its historical ones; rows are read through the
model's default manager (the tenant scope's, for the app's models), inside the caller's `all_tenants`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import models, transaction

from memory.longterm import store
from memory.longterm.events.storing import search_text

BATCH = 64


@dataclass
class Reembedded:
    """What a pass did, per table (verbose plural name -> rows), and where the model failed ("" when it did not)."""

    rows: dict[str, int] = field(default_factory=dict)
    failed: str = ""

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def row_text(row: models.Model) -> str:
    """The text a row was embedded from: an event's summary with its entities, otherwise its text."""
    if hasattr(row, "content_summary"):
        return search_text(row.content_summary, row.entities or [])
    return row.text


def _outdated(model: type[models.Model], after: int) -> list[models.Model]:
    """The next rows after pk `after` (at most BATCH, scanned in pages of 8 x BATCH) whose vector is not the one
    the current setting gives their text (with MEMORY_EMBEDDER=auto that depends on each row's language)."""
    found: list[models.Model] = []
    rows = model._default_manager.order_by("pk")
    while len(found) < BATCH:
        page = list(rows.filter(pk__gt=after)[: 8 * BATCH])
        if not page:
            break
        for row in page:
            after = row.pk
            if row.embedding is None or row.embedder != store.embedder_for(row_text(row)).signature():
                found.append(row)
                if len(found) == BATCH:
                    break
    return found


def reembed(
    tables: Iterable[type[models.Model]],
    *,
    dry_run: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> Reembedded:
    """Embed again every outdated row of `tables` in batches of BATCH (each batch one transaction), calling
    `progress(table, done)` after each (`dry_run`: count them only). Stops at the first batch the model fails on
    (those rows keep what they had). The caller enters the tenant scope (all tenants)."""
    result = Reembedded()
    for model in tables:
        name = str(model._meta.verbose_name_plural)
        result.rows[name] = 0
        last = 0
        while batch := _outdated(model, last):
            last = batch[-1].pk
            if not dry_run:
                vectors, signatures = store.embed([row_text(row) for row in batch])
                if not all(signatures):  # the model failed: stop instead of looping over the same rows
                    result.failed = name
                    return result
                with transaction.atomic(using=model._default_manager.db):
                    for row, vector, signature in zip(batch, vectors, signatures, strict=True):
                        row.embedding, row.embedder = vector, signature
                    model._default_manager.bulk_update(batch, ["embedding", "embedder"])
            result.rows[name] += len(batch)
            if progress is not None and not dry_run:
                progress(name, result.rows[name])
    store.clear_caches()
    return result
