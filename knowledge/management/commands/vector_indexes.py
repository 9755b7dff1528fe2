"""`python manage.py vector_indexes`: on pgvector, build the HNSW index of every knowledge base that holds at least
KNOWLEDGE_OWN_INDEX_MIN_CHUNKS chunks of one dimension and has none yet (ingestion does this as a knowledge base
grows; this command covers knowledge bases that were large before the setting or this version), and drop the
indexes of knowledge bases that no longer exist (deleted with their tenant, or whose drop task failed)."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db.models import Count

from knowledge import vectorstore
from knowledge.models import Chunk, KnowledgeBase
from tenants.models import Tenant
from tenants.scope import all_tenants, tenant_scope


class Command(BaseCommand):
    help = "Build the HNSW indexes of large knowledge bases and drop those of deleted ones (pgvector only)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Only list what would be built or dropped.")

    def handle(self, *args, dry_run: bool, **options) -> None:
        if not vectorstore.uses_pgvector():
            self.stdout.write("The database has no pgvector: the exact search needs no index.")
            return
        minimum = vectorstore.own_index_min_chunks()
        with all_tenants(reason="vector_indexes: an operator command over every tenant's knowledge bases"):
            existing = set(KnowledgeBase.objects.values_list("pk", flat=True))
            large = (
                list(
                    Chunk.objects.filter(embedding_dim__gt=0)
                    .values("tenant_id", "knowledge_base_id", "embedding_dim")
                    .annotate(chunks=Count("id"))
                    .filter(chunks__gte=minimum)
                    .order_by("knowledge_base_id", "embedding_dim")
                )
                if minimum
                else []
            )
            tenants = Tenant.objects.in_bulk({row["tenant_id"] for row in large})
        dropped = [(name, kb_id) for name, (_, kb_id) in vectorstore.own_indexes().items() if kb_id not in existing]
        for name, knowledge_base_id in dropped:
            self.stdout.write(f"drop {name} (knowledge base {knowledge_base_id} is gone)")
            if not dry_run:
                vectorstore.drop_own_indexes(knowledge_base_id)
        built = 0
        for row in large:
            knowledge_base_id, dimension = row["knowledge_base_id"], row["embedding_dim"]
            with tenant_scope(tenants[row["tenant_id"]]):
                if not vectorstore.needs_own_index(knowledge_base_id, dimension):
                    continue
                name = vectorstore.own_index_name(dimension, knowledge_base_id)
                self.stdout.write(f"build {name} ({row['chunks']} chunks)")
                if dry_run or vectorstore.ensure_own_index(knowledge_base_id, dimension):
                    built += 1
        summary = "would build %s, drop %s" if dry_run else "built %s, dropped %s"
        self.stdout.write(self.style.SUCCESS(summary % (built, len(dropped))))
