"""Django's migrate, run with every tenant's rows visible: a data migration reads and writes tenant-owned tables
under row-level security (tenants.rls), which shows nothing outside a scope."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as MigrateCommand

from tenants.scope import all_tenants


class Command(MigrateCommand):
    def handle(self, *args: Any, **options: Any) -> None:
        with all_tenants(reason="migrate: data migrations and the row-level security policies"):
            super().handle(*args, **options)
