"""The scoped manager of tenant-owned models.

The tenant filter is an expression resolved when the SQL is compiled, not when the queryset is built: a
queryset defined at import time (a form field, a class attribute) is still filtered by the scope active when
it runs, and one that runs outside any scope raises instead of returning every tenant's rows. Subqueries,
updates and deletes are compiled the same way, so they are covered too.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.expressions import Expression

from tenants.scope import TenantScopeError, current_scope


class CurrentTenantId(Expression):
    """The active scope's tenant id, bound at SQL compilation time.

    Inside all_tenants() it compiles to the tenant column itself (`tenant_id = tenant_id`, true for every row).
    """

    def __init__(self, column: Expression | None = None, output_field: Any = None) -> None:
        super().__init__(output_field=output_field or models.BigIntegerField())
        self.column = column

    def resolve_expression(self, query=None, allow_joins=True, reuse=None, summarize=False, for_save=False):
        clone = self.copy()
        clone.is_summary = summarize
        # Resolve against the model's own query once. A queryset used as a subquery is resolved again against
        # the outer query; the column must stay the inner table's (aliases are relabelled by Django).
        if clone.column is None and query is not None:
            clone.column = models.F("tenant_id").resolve_expression(query, allow_joins, reuse, summarize, for_save)
        return clone

    def get_source_expressions(self) -> list:
        return [self.column] if self.column is not None else []

    def set_source_expressions(self, exprs: list) -> None:
        self.column = exprs[0] if exprs else None

    def as_sql(self, compiler, connection):
        scope = current_scope()
        if scope is None:
            model = compiler.query.model
            name = model._meta.label if model else "tenant-owned data"
            raise TenantScopeError(
                f"Query of {name} outside a tenant scope. Enter tenant_scope(tenant), "
                "or all_tenants(reason=...) where every tenant must be seen."
            )
        if scope.is_bypass:
            return compiler.compile(self.column)
        return "%s", [scope.tenant.pk]


class TenantQuerySet(models.QuerySet):
    pass


class TenantScopedManager(models.Manager.from_queryset(TenantQuerySet)):
    """Default manager of TenantOwned models: only the active scope's rows; raises outside a scope."""

    _filtered: TenantQuerySet | None = None

    def get_queryset(self) -> TenantQuerySet:
        # The filtered queryset is built once (parsing the lookup was about 1 ms of a chat turn's 5 statements)
        # and each call gets a clone of it, as chaining a queryset does: the filter's value is read when the SQL is
        # compiled, so one built queryset serves every scope. A manager for another database or with hints
        # (db_manager's) builds its own as before.
        if self._db is not None or self._hints:
            return super().get_queryset().filter(tenant_id=CurrentTenantId())
        filtered = self._filtered
        if filtered is None or filtered.model is not self.model:
            filtered = self._filtered = super().get_queryset().filter(tenant_id=CurrentTenantId())
        return filtered._chain()


def ensure_scope_allows(tenant_id: int | None) -> None:
    """Raise unless the active scope may write rows of `tenant_id`."""
    scope = current_scope()
    if scope is None:
        raise TenantScopeError("Writing tenant-owned data outside a tenant scope.")
    if scope.is_bypass:
        return
    if tenant_id is not None and tenant_id != scope.tenant.pk:
        raise TenantScopeError("Writing another tenant's row from inside this tenant's scope is refused.")
