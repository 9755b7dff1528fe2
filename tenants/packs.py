"""Packs: features a platform operator enables per tenant (the restaurant's menu and orders, the energy demo's PV
tools...). A pack is a Django app above tenants/ that registers itself here from its AppConfig.ready(); what it
contributes (tools, admin models, workflow templates, demo data) is tagged with its key in the registry that
offers it, and each registry asks `pack_enabled` before offering it to a tenant. Nothing branches on a pack's name.

A tenant's enabled packs are the keys in `Tenant.packs`; a new tenant has none. Only platform superusers change
them (Admin › Tenants); a tenant's own owners and admins see them read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import models
from django.utils.functional import Promise

from core.registry import Registry

if TYPE_CHECKING:
    from tenants.models import Tenant


@dataclass(frozen=True)
class Pack:
    """A pack's declaration. `key` is also the label of its Django app: that app's models belong to the pack."""

    key: str
    name: str | Promise
    description: str | Promise = ""


_packs: Registry[Pack] = Registry("the packs (tenants.packs)", order=lambda pack: pack.key)


def register_pack(pack: Pack) -> Pack:
    """Declare a pack (from its AppConfig.ready()); registering the same declaration again is harmless."""
    return _packs.register(pack.key, pack)


def all_packs() -> list[Pack]:
    return _packs.values()


def get_pack(key: str) -> Pack | None:
    return _packs.find(key)


def pack_name(key: str) -> str:
    """The pack's name for messages (its key when it is not registered)."""
    pack = _packs.find(key)
    return str(pack.name) if pack is not None else key


def pack_enabled(tenant: Tenant | None, key: str) -> bool:
    """Whether `tenant` may use what the pack `key` contributes. "" (part of the platform, in no pack) always is;
    a pack's contribution never is without a tenant."""
    if not key:
        return True
    return tenant is not None and key in (tenant.packs or [])


def pack_of_model(model: type[models.Model]) -> str:
    """The key of the pack a model belongs to ("" when it belongs to none)."""
    label = model._meta.app_label
    return label if label in _packs else ""
