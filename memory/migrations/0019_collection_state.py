"""Long-term memory's search collections: each owner's row count and newest id kept in memory_collectionstate by
triggers on the three searched tables (PostgreSQL only), so that a recall reads one row to tell whether the
collection a process holds is current, instead of counting the owner's rows (memory.longterm.store.collection).
The rows already stored are counted here once. SQLite keeps counting (no triggers are made there)."""

from django.db import migrations, models
import django.db.models.deletion

# table -> (the model's label, its owner columns as memory_collectionstate's user_id, key, conversation_id). Frozen
# here as the models declare it today (`collection_owner`); tests/memory/test_collection_state.py checks they agree.
TABLES = {
    "memory_event": ("memory.event", "user_id", "key", "0"),
    "memory_memoryitem": ("memory.memoryitem", "user_id", "key", "0"),
    "memory_turnmemory": ("memory.turnmemory", "0", "''", "conversation_id"),
}
OWNER = ("user_id", "key", "conversation_id")


def _statements(table: str) -> list[str]:
    label, *owner = TABLES[table]
    selected = ", ".join(f"{expression} AS {name}" for expression, name in zip(owner, OWNER))
    grouped = ", ".join(expression for expression in owner if expression not in ("0", "''")) or "tenant_id"
    # The newest id after a deletion that took it, read as the recall's own count would see it (one index lookup).
    # Only then: a row inserted meanwhile by a transaction this statement cannot see has already raised the state
    # row's newest id (its lock is waited for, and the row re-read), and a read of the table would miss it.
    match = " AND ".join(f"r.{expression} = s.{name}" for expression, name in zip(owner, OWNER) if expression == name)
    return [
        f"""CREATE OR REPLACE FUNCTION {table}_state_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_collectionstate AS s (tenant_id, label, user_id, key, conversation_id, row_count, newest_id)
    SELECT tenant_id, '{label}', {selected}, count(*), max(id) FROM added GROUP BY tenant_id, {grouped}
    ON CONFLICT (tenant_id, label, user_id, key, conversation_id) DO UPDATE
        SET row_count = s.row_count + EXCLUDED.row_count, newest_id = greatest(s.newest_id, EXCLUDED.newest_id);
    RETURN NULL;
END $$""",
        f"""CREATE OR REPLACE FUNCTION {table}_state_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE memory_collectionstate AS s
    SET row_count = s.row_count - gone.n,
        newest_id = CASE WHEN gone.top < s.newest_id THEN s.newest_id ELSE coalesce(
            (SELECT max(r.id) FROM {table} AS r WHERE r.tenant_id = s.tenant_id AND {match}), 0) END
    FROM (
        SELECT tenant_id, {selected}, count(*) AS n, max(id) AS top FROM removed GROUP BY tenant_id, {grouped}
    ) AS gone
    WHERE s.label = '{label}' AND s.tenant_id = gone.tenant_id AND s.user_id = gone.user_id AND s.key = gone.key
        AND s.conversation_id = gone.conversation_id;
    RETURN NULL;
END $$""",
        f"DROP TRIGGER IF EXISTS state_added ON {table}",
        f"CREATE TRIGGER state_added AFTER INSERT ON {table} REFERENCING NEW TABLE AS added "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_state_added()",
        f"DROP TRIGGER IF EXISTS state_removed ON {table}",
        f"CREATE TRIGGER state_removed AFTER DELETE ON {table} REFERENCING OLD TABLE AS removed "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {table}_state_removed()",
        f"""INSERT INTO memory_collectionstate (tenant_id, label, user_id, key, conversation_id, row_count, newest_id)
SELECT tenant_id, '{label}', {selected}, count(*), max(id) FROM {table} GROUP BY tenant_id, {grouped}""",
    ]


def create_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        for statement in _statements(table):
            schema_editor.execute(statement)


def drop_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS state_added ON {table}")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS state_removed ON {table}")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {table}_state_added(), {table}_state_removed()")


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0018_memory_multilingual"),
        ("tenants", "0002_tenant_packs"),
    ]

    operations = [
        migrations.CreateModel(
            name="CollectionState",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("label", models.CharField(max_length=60, verbose_name="model")),
                ("user_id", models.BigIntegerField(default=0, verbose_name="user id")),
                ("key", models.CharField(blank=True, default="", max_length=100, verbose_name="memory key")),
                ("conversation_id", models.BigIntegerField(default=0, verbose_name="conversation id")),
                ("row_count", models.BigIntegerField(default=0, verbose_name="rows")),
                ("newest_id", models.BigIntegerField(default=0, verbose_name="newest id")),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                        verbose_name="tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "search collection state",
                "verbose_name_plural": "search collection states",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "label", "user_id", "key", "conversation_id"),
                        name="memory_collectionstate_owner",
                    )
                ],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
