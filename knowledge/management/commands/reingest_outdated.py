"""`python manage.py reingest_outdated`: after an upgrade that changed the local embedding model, queue every
document whose vectors came from the older model for ingestion again (all tenants; vector search skips those
chunks until then, keyword search still finds them)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from knowledge.models import LOCAL_KINDS, KnowledgeBase
from knowledge.selectors import outdated_documents
from knowledge.services import knowledge_base_reingest
from tenants.scope import all_tenants, tenant_scope


class Command(BaseCommand):
    help = "Queue the documents embedded with an older version of the local model for ingestion again."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Only count them.")

    def handle(self, *args, dry_run: bool, **options) -> None:
        with all_tenants(reason="reingest_outdated: an operator command over every tenant's knowledge bases"):
            knowledge_bases = list(
                KnowledgeBase.objects.filter(embedder__in=LOCAL_KINDS).select_related("tenant").order_by("pk")
            )
        total = 0
        for knowledge_base in knowledge_bases:
            with tenant_scope(knowledge_base.tenant):
                if dry_run:
                    count = outdated_documents(knowledge_base=knowledge_base).count()
                else:
                    count = knowledge_base_reingest(knowledge_base=knowledge_base, only_outdated=True)
            if count:
                self.stdout.write(f"{knowledge_base.tenant.name} / {knowledge_base.name}: {count}")
            total += count
        verb = "outdated" if dry_run else "queued for ingestion"
        self.stdout.write(self.style.SUCCESS(f"{total} documents {verb} / 共 {total} 个文档"))
