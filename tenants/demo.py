"""Demo data from the apps above tenants/: `seed_demo` calls every registered seeder once the demo tenants exist.

tenants/ sits on the lowest floor and must not import the apps above it, so they register here instead, from
their AppConfig.ready(). A seeder must be idempotent: `seed_demo` may run any number of times. A pack's seeder
(registered with `pack=`) is given only the tenants that have the pack enabled (tenants.packs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from core.registry import Registry, qualified_name
from tenants.models import Tenant

# seeder(tenants, write): `write` prints one line of the command's output.
DemoSeeder = Callable[[Sequence[Tenant], Callable[[str], None]], None]

# (seeder, the key of the pack it seeds for, "" for the platform's own demo data), in registration order.
_seeders: Registry[tuple[DemoSeeder, str]] = Registry("the demo seeders (tenants.demo)")


def register_demo_seeder(seeder: DemoSeeder, *, pack: str = "") -> None:
    """Add a seeder, of a pack's demo data when `pack` is given (registering the same one twice keeps one)."""
    _seeders.register(qualified_name(seeder), (seeder, pack))


def run_demo_seeders(tenants: Sequence[Tenant], write: Callable[[str], None], *, pack: str | None = None) -> None:
    """Run every seeder (or only those of the pack `pack`); a pack's seeder gets the tenants that have the pack."""
    for seeder, seeds_for in _seeders:
        if pack is None or seeds_for == pack:
            seeder([tenant for tenant in tenants if tenant.has_pack(seeds_for)], write)
