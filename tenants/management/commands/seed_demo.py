"""`python manage.py seed_demo`: the demo tenants and their logins. Safe to run again: nothing is duplicated."""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from tenants.demo import run_demo_seeders
from tenants.models import Role
from tenants.services import membership_set, tenant_ensure, tenant_packs_enable, user_ensure

DEMO_PASSWORD = "demo-pass-2026"  # noqa: S105 - the demo logins are printed on purpose

DEMO_TENANTS = [
    # slug, name, username prefix, the packs enabled for it (each demo tenant gets its own pack's tools and data)
    ("energy", "能源示范", "energy", ["energy"]),
    ("restaurant", "餐厅示范", "restaurant", ["restaurant"]),
]


class Command(BaseCommand):
    help = "Create (or refresh) the demo tenants 能源示范 and 餐厅示范 with an owner, an admin and a member each."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--password", default=DEMO_PASSWORD, help="Password for every demo login.")

    @transaction.atomic
    def handle(self, *args, password: str, **options) -> None:
        rows = []
        user_ensure(username="platform", password=password, is_superuser=True)
        rows.append(("platform", "—", "platform superuser / 平台超级管理员"))
        tenants = []
        for slug, name, prefix, packs in DEMO_TENANTS:
            tenant = tenant_packs_enable(tenant=tenant_ensure(slug=slug, name=name), keys=packs)
            tenants.append(tenant)
            for role in (Role.OWNER, Role.ADMIN, Role.MEMBER):
                username = f"{prefix}-{role.value}"
                user = user_ensure(username=username, password=password, is_staff=role != Role.MEMBER)
                membership_set(user=user, tenant=tenant, role=role)
                rows.append((username, name, role.value))
        # One user in both tenants, to show the tenant switcher.
        both = user_ensure(username="consultant", password=password)
        for tenant in tenants:
            membership_set(user=both, tenant=tenant, role=Role.MEMBER)
        rows.append(("consultant", " + ".join(t.name for t in tenants), "member"))
        # The apps above tenants/ (the models of llm, the agents...) add their demo data through tenants.demo; a
        # pack's only to the tenants that have it.
        seeded: list[str] = []
        run_demo_seeders(tenants, seeded.append)

        self.stdout.write(self.style.SUCCESS("Demo data ready / 演示数据已就绪"))
        self.stdout.write(f"Password for every login / 所有账号的密码: {password}")
        width = max(len(r[0]) for r in rows)
        for username, tenant, role in rows:
            self.stdout.write(f"  {username.ljust(width)}  {tenant}  ({role})")
        for line in seeded:
            self.stdout.write(line)
