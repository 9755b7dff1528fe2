"""`python manage.py reembed_memory`: after MEMORY_EMBEDDER changed (or an upgrade changed the local model), embed
again every long-term memory row (events, memories, indexed turns) whose vector came from another model. Until
then those rows are found by keyword search only: vector search compares only vectors of the current model.
Run it with the new setting, then restart the processes (each keeps the collections it has read)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from memory.longterm import store
from memory.longterm.events import search_text
from memory.models import Event, MemoryItem, TurnMemory
from tenants.scope import all_tenants

BATCH = 64


def _text(row) -> str:
    if isinstance(row, Event):
        return search_text(row.content_summary, row.entities or [])
    return row.text


class Command(BaseCommand):
    help = "Embed again the long-term memory rows whose vectors came from another model than MEMORY_EMBEDDER."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Only count them.")

    def handle(self, *args, dry_run: bool, **options) -> None:
        signature = store.embedder().signature()
        total = 0
        with all_tenants(reason="reembed_memory: an operator command over every tenant's long-term memory"):
            for model in (Event, MemoryItem, TurnMemory):
                outdated = model.objects.exclude(embedder=signature).order_by("pk")
                count = outdated.count()
                total += count
                if dry_run or not count:
                    self.stdout.write(f"{model._meta.verbose_name_plural}: {count}")
                    continue
                done = 0
                last = 0
                while True:
                    rows = list(outdated.filter(pk__gt=last)[:BATCH])
                    if not rows:
                        break
                    vectors, used = store.embed([_text(row) for row in rows])
                    with transaction.atomic():
                        for row, vector in zip(rows, vectors, strict=True):
                            row.embedding, row.embedder = vector, used if vector is not None else ""
                        model.objects.bulk_update(rows, ["embedding", "embedder"])
                    done += len(rows)
                    last = rows[-1].pk
                    if not used:  # the model failed: stop instead of looping over the same rows
                        self.stderr.write(f"{model._meta.verbose_name_plural}: the model failed after {done}")
                        return
                self.stdout.write(f"{model._meta.verbose_name_plural}: {done}")
        store.clear_caches()
        verb = "outdated" if dry_run else "embedded again"
        self.stdout.write(self.style.SUCCESS(f"{total} rows {verb} with {signature} / 共 {total} 条"))
