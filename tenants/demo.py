"""Demo data from the apps above tenants/: `seed_demo` calls every registered seeder once the demo tenants exist.

tenants/ sits on the lowest floor and must not import the apps above it, so they register here instead, from
their AppConfig.ready(). A seeder must be idempotent: `seed_demo` may run any number of times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tenants.models import Tenant

# seeder(tenants, write): `write` prints one line of the command's output.
DemoSeeder = Callable[[Sequence[Tenant], Callable[[str], None]], None]

_seeders: list[DemoSeeder] = []


def register_demo_seeder(seeder: DemoSeeder) -> None:
    """Add a seeder (registering the same one twice keeps one)."""
    if seeder not in _seeders:
        _seeders.append(seeder)


def demo_seeders() -> list[DemoSeeder]:
    return list(_seeders)


def run_demo_seeders(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    for seeder in demo_seeders():
        seeder(tenants, write)
