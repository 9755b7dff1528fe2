"""Row-level security in PostgreSQL: a second wall under the tenant scope.

The scoped manager (tenants.managers) filters every ORM query by the active scope. Row-level security repeats the
rule inside the database, so that what bypasses the manager (raw SQL, `_base_manager`, a cascade, a bug) still sees
only the scope's tenant:

- every tenant-owned table (each concrete `TenantOwned` model) has row-level security enabled and forced (the
  application's role owns the tables; FORCE makes the policy apply to the owner too) and one policy,
  `tenant_scope`: a row is visible and writable when its `tenant_id` is the scope's tenant, or when the scope is
  `all_tenants(...)`. With no scope, nothing is visible;
- the scope reaches the database as the setting `app.tenant_id` ("<id>", "*" for all tenants, "" for none),
  written by an execute wrapper on every PostgreSQL connection before a statement whenever the connection's value
  differs from the active scope (HTTP, websocket, Celery and management commands all enter a scope, so they all
  set it): at session level in autocommit, and for the transaction (`set_config(..., true)`) inside one, so a
  rollback can never leave a stale value behind. Most statements cost nothing extra: the value is remembered per
  connection and per transaction (psycopg reports the transaction status without a round trip);
- the policies and two helper functions are (re)installed after every `migrate` (post_migrate), so a new
  tenant-owned model is covered by the next migrate; `migrate` itself runs in `all_tenants`.

A PostgreSQL superuser or a role with BYPASSRLS is not subject to policies: the system check `tenants.W001`
warns when the application connects as one. SQLite (the embedded default) has no row-level security; the scoped
manager is the only wall there.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core import checks
from django.db import connections
from django.db.backends.signals import connection_created

from tenants.models import TenantOwned
from tenants.scope import current_scope

SETTING = "app.tenant_id"
ALL = "*"
POLICY = "tenant_scope"

# The policy calls them through scalar subqueries: each becomes an InitPlan, evaluated once per statement, and the
# per-row check is a comparison with its result (called bare, the functions ran for every row: 14x slower counts).
FUNCTIONS = """
CREATE OR REPLACE FUNCTION app_tenant_id() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN value ~ '^[0-9]+$' THEN value::bigint END
    FROM (SELECT current_setting('app.tenant_id', true) AS value) AS setting
$$;
CREATE OR REPLACE FUNCTION app_all_tenants() RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('app.tenant_id', true) = '*', false)
$$;
"""  # SETTING and ALL, spelled out
CONDITION = "(tenant_id = (SELECT app_tenant_id()) OR (SELECT app_all_tenants()))"


def scope_value() -> str:
    """The active scope as the database setting: a tenant id, "*" for all tenants, "" for none."""
    scope = current_scope()
    if scope is None:
        return ""
    if scope.is_bypass:
        return ALL
    return str(scope.tenant.pk)


# --- keeping the setting in step with the scope -------------------------------------------------------------------

_IDLE, _IN_TRANSACTION = 0, 2  # psycopg.pq.TransactionStatus.IDLE / INTRANS


@dataclass
class _Known:
    """What one PostgreSQL connection holds: the session value, and a value set for the current transaction."""

    session: str | None = None
    local: tuple[str, tuple[str, ...]] | None = None  # (value, savepoint ids when it was set)


_known: weakref.WeakKeyDictionary[Any, _Known] = weakref.WeakKeyDictionary()


def _set(cursor: Any, value: str, *, local: bool) -> None:
    cursor.execute("SELECT set_config(%s, %s, %s)", [SETTING, value, local])


def scope_setting(execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """The execute wrapper: before a statement, make the connection's `app.tenant_id` the active scope's."""
    wrapper = context["connection"]
    raw = wrapper.connection
    value = scope_value()
    known = _known.get(raw)
    if known is None:
        known = _known[raw] = _Known()
    status = raw.info.transaction_status
    savepoints = tuple(wrapper.savepoint_ids)
    cursor = context["cursor"].cursor
    if status == _IDLE:
        known.local = None  # a transaction ended since: what it set locally is gone
        if known.session != value:
            if wrapper.get_autocommit():
                _set(cursor, value, local=False)
                known.session = value
            else:  # this statement starts a transaction: set it for that transaction only
                _set(cursor, value, local=True)
                known.local = (value, savepoints)
    elif status == _IN_TRANSACTION:
        current = known.local if known.local is not None else (known.session, savepoints)
        if current != (value, savepoints):
            # A savepoint begun, released or rolled back since the value was set may have changed it: set again.
            _set(cursor, value, local=True)
            known.local = (value, savepoints)
    return execute(sql, params, many, context)


def _install_wrapper(sender: Any, connection: Any, **kwargs: Any) -> None:
    if connection.vendor != "postgresql":
        return
    if scope_setting not in connection.execute_wrappers:
        connection.execute_wrappers.append(scope_setting)


def connect_signals() -> None:
    """Called from the tenants app's ready()."""
    connection_created.connect(_install_wrapper, dispatch_uid="tenants.rls.install_wrapper")
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None:
            _install_wrapper(None, connection)


# --- policies -----------------------------------------------------------------------------------------------------


def tenant_tables() -> list[str]:
    """The tables of every concrete tenant-owned model."""
    return sorted(
        {
            model._meta.db_table
            for model in apps.get_models()
            if issubclass(model, TenantOwned) and model._meta.managed and not model._meta.proxy
        }
    )


def policy_statements(table: str, quote: Any) -> list[str]:
    name = quote(table)
    return [
        f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {name} FORCE ROW LEVEL SECURITY",
        f"DROP POLICY IF EXISTS {POLICY} ON {name}",
        f"CREATE POLICY {POLICY} ON {name} USING {CONDITION} WITH CHECK {CONDITION}",
    ]


def install_policies(*, using: str = "default") -> list[str]:
    """Enable row-level security with the tenant policy on every tenant-owned table (idempotent). Returns the
    tables."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    tables = tenant_tables()
    existing = set(connection.introspection.table_names())
    tables = [table for table in tables if table in existing]
    with connection.cursor() as cursor:
        cursor.execute(FUNCTIONS)
        for table in tables:
            for statement in policy_statements(table, connection.ops.quote_name):
                cursor.execute(statement)
    return tables


def post_migrate_policies(sender: Any, using: str = "default", **kwargs: Any) -> None:
    install_policies(using=using)


# --- the role -----------------------------------------------------------------------------------------------------


@checks.register(checks.Tags.database)
def check_role(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when the application's PostgreSQL role is not subject to row-level security."""
    found: list[checks.CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
            row = cursor.fetchone()
        if row and (row[0] or row[1]):
            found.append(
                checks.Warning(
                    "The database role is a superuser or has BYPASSRLS: row-level security does not apply to it.",
                    hint="Connect as a role without SUPERUSER and BYPASSRLS (the tables' owner is fine).",
                    id="tenants.W001",
                )
            )
    return found
