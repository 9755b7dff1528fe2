"""A tenant's generation: a token in the shared cache that changes whenever one of the rows a request's access is
read from changes (its API keys and their members, its agents and their versions, its model providers, the tenant
itself). A process keeps what it read from those rows in a TenantMemo for as long as the token it read before
reading them is still the tenant's: a request then costs one cache read instead of those statements, and a change
made in any process (a revoked key, an unpublished agent) is seen by the next request of every process.

The cache is Redis when REDIS_URL is set (every process shares it); in-process otherwise (the embedded default runs
one process). A change bumps the token when its row is saved or deleted and again when its transaction commits: a
process that read the old row inside that window stored it under the token of before, which the commit's bump
retires. Bulk `QuerySet.update()` sends no signal: code that changes these rows that way bumps the tenant itself.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from tenants.models import Membership

V = TypeVar("V")

KEY = "tenant-generation:{}"


# The tokens read inside read_once(): tenant id -> token.
_read: ContextVar[dict[int, str] | None] = ContextVar("tenant_generations_read", default=None)


@contextlib.contextmanager
def read_once() -> Iterator[None]:
    """Within it, each tenant's token is read from the cache once (a request's reads in one database hop): a change
    made meanwhile by another process is seen by the next request, as if the tokens had been read at its start. A
    bump inside it is seen at once."""
    reset = _read.set({})
    try:
        yield
    finally:
        _read.reset(reset)


def generation(tenant_id: int) -> str:
    """The tenant's current token (a new one when the cache has none: whatever was kept under another is stale)."""
    kept = _read.get()
    if kept is not None and tenant_id in kept:
        return kept[tenant_id]
    key = KEY.format(tenant_id)
    token = cache.get(key)
    if token is None:
        cache.add(key, uuid.uuid4().hex, timeout=None)
        token = cache.get(key)
    if kept is not None:
        kept[tenant_id] = token
    return token


def bump(tenant_id: int) -> None:
    """Retire what every process keeps of the tenant's rows, now and again when the current transaction commits."""

    def retire() -> None:
        cache.set(KEY.format(tenant_id), uuid.uuid4().hex, timeout=None)
        kept = _read.get()
        if kept is not None:
            kept.pop(tenant_id, None)

    retire()
    transaction.on_commit(retire)


def _own_tenant(row: Any) -> Iterable[int]:
    return (row.tenant_id,)


def user_tenants(user: Any) -> Iterable[int]:
    """The tenants a user account belongs to (a change of the account changes what its keys may do there)."""
    return Membership.objects.filter(user_id=user.pk).values_list("tenant_id", flat=True)


def bump_on_change(
    model: type, tenants_of: Callable[[Any], Iterable[int]] = _own_tenant, fields: Iterable[str] = ()
) -> None:
    """Bump the tenants of each saved or deleted row of `model` (`tenants_of(row)`; its own tenant by default).
    `fields`: only a save that may change one of them (a save of named other fields, a login's, does not)."""
    watched = frozenset(fields)

    def changed(sender: Any, instance: Any, update_fields: Iterable[str] | None = None, **kwargs: Any) -> None:
        if watched and update_fields is not None and not watched.intersection(update_fields):
            return
        for tenant_id in set(tenants_of(instance)):
            if tenant_id is not None:
                bump(tenant_id)

    label = model._meta.label_lower
    post_save.connect(changed, sender=model, weak=False, dispatch_uid=f"tenants.generation.save.{label}")
    post_delete.connect(changed, sender=model, weak=False, dispatch_uid=f"tenants.generation.delete.{label}")
    for field in model._meta.many_to_many:  # a row's own many-to-many fields (an API key's agents)
        m2m_changed.connect(
            changed, sender=field.remote_field.through, weak=False,
            dispatch_uid=f"tenants.generation.m2m.{label}.{field.name}",
        )  # fmt: skip


class TenantMemo(Generic[V]):
    """Values read from a tenant's rows, kept in this process under the tenant's generation. Bounded: past `size`
    entries it starts again empty (a value is read again at most once per generation)."""

    _all: list[TenantMemo[Any]] = []

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._values: dict[tuple[int, Hashable], tuple[str, V]] = {}
        self._lock = threading.Lock()
        TenantMemo._all.append(self)

    def get(self, tenant_id: int, key: Hashable, load: Callable[[], V]) -> V:
        """The value kept for `key` under the tenant's current generation, else `load()`, kept under the token read
        before it ran."""
        token = generation(tenant_id)
        found = self._values.get((tenant_id, key))
        if found is not None and found[0] == token:
            return found[1]
        value = load()
        with self._lock:
            if len(self._values) >= self.size:
                self._values.clear()
            self._values[(tenant_id, key)] = (token, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._values.clear()

    @classmethod
    def clear_all(cls) -> None:
        """Forget every memo's values (tests: a rolled-back database hands the same tenant ids out again)."""
        for memo in cls._all:
            memo.clear()
