"""Migrations memory 0013-0015: the widget's visitors, kept as "<embed id>.<hash>" strings on conversations, become
memory.Visitor rows; what page loads made before any message (an account and an empty conversation per visitor id)
goes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agents.services import agent_create
from tenants.scope import all_tenants, tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("memory", "0012_message_trace_parent")]
AFTER = [("memory", "0015_visitor_key_removed")]


def _migrate(targets: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    with all_tenants(reason="test: a migration runs for every tenant, as migrate does"):
        executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_visitor_strings_become_rows_and_page_load_leftovers_go(tenant):
    with tenant_scope(tenant):  # tables the migration does not touch: made with today's models
        agent_id = agent_create(tenant=tenant, name="Shop helper").pk
    wrote = User.objects.create(username="visitor-7-" + "a" * 40, is_active=False)
    idle = User.objects.create(username="visitor-7-" + "b" * 40, is_active=False)
    old = _migrate(BEFORE)
    try:
        Agent, Conversation = old.get_model("agents", "Agent"), old.get_model("memory", "Conversation")
        Message = old.get_model("memory", "Message")
        with all_tenants(reason="test: rows as the old widget made them"):
            agent = Agent.objects.get(pk=agent_id)
            kept = [Conversation.objects.create(tenant_id=tenant.pk, agent=agent, user_id=wrote.pk, source="widget",
                                                visitor="7." + "a" * 40) for _ in range(2)]  # fmt: skip
            for conversation in kept:
                Message.objects.create(tenant_id=tenant.pk, conversation=conversation, role="user", content="hi")
            Conversation.objects.create(tenant_id=tenant.pk, agent=agent, user_id=idle.pk, source="widget",
                                        visitor="7." + "b" * 40)  # fmt: skip
        new = _migrate(AFTER)
        Visitor, Conversation = new.get_model("memory", "Visitor"), new.get_model("memory", "Conversation")
        with all_tenants(reason="test: what the migration left"):
            visitors = list(Visitor.objects.values_list("embed_id", "id_hash", "user_id"))
            assert visitors == [(7, "a" * 40, wrote.pk)]
            assert sorted(Conversation.objects.values_list("pk", "visitor__id_hash")) == [
                (conversation.pk, "a" * 40) for conversation in kept
            ]
            assert not User.objects.filter(pk=idle.pk).exists()
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
