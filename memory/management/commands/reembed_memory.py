"""`python manage.py reembed_memory`: after MEMORY_EMBEDDER changed (or an upgrade changed the local model), embed
again every long-term memory row (events, memories, indexed turns) whose vector came from another model. Until
then those rows are found by keyword search only: vector search compares only vectors of the current model.
Run it with the new setting, then restart the processes (each keeps the collections it has read)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from core.conf import setting
from memory.longterm.reembed import reembed
from memory.models import Event, MemoryItem, TurnMemory
from tenants.scope import all_tenants


class Command(BaseCommand):
    help = "Embed again the long-term memory rows whose vectors came from another model than MEMORY_EMBEDDER."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Only count them.")

    def _progress(self, table: str, done: int) -> None:
        self.stdout.write(f"{table}: {done} ...")

    def handle(self, *args, dry_run: bool, **options) -> None:
        with all_tenants(reason="reembed_memory: an operator command over every tenant's long-term memory"):
            result = reembed((Event, MemoryItem, TurnMemory), dry_run=dry_run, progress=self._progress)
        for table, rows in result.rows.items():
            self.stdout.write(f"{table}: {rows}")
        if result.failed:
            raise CommandError(
                f"模型在处理 {result.failed} 时失败，已完成 {result.total} 条 / The model failed on {result.failed} "
                f"after {result.total} rows; run the command again when it works."
            )
        verb = "outdated" if dry_run else "embedded again"
        choice = setting("MEMORY_EMBEDDER")
        done = f"{result.total} rows {verb} (MEMORY_EMBEDDER={choice}) / 共 {result.total} 条"
        self.stdout.write(self.style.SUCCESS(done))
