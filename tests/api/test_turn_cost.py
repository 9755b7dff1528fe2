"""What a /v1 turn costs the database, and what the per-process memo of a tenant's rows (tenants.generation) may
never cost in correctness: with the real openai SDK against Daphne, a stateless turn runs at most
V1_TURN_STATEMENTS statements once its key is known; a key revoked, an agent switched off or unpublished, a member
who left or was deactivated, are refused at the very next request, including a change made by another process
(which only reaches this one through the shared cache's generation)."""

from __future__ import annotations

import time

import openai
import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection

from agents.models import Agent, AgentVersion
from api.keys import key_revoke
from api.models import ApiKey, KeyScope
from tenants.generation import KEY, TenantMemo, bump, generation, read_once
from tenants.models import Membership
from tenants.scope import tenant_scope
from tests.queries import count_statements

pytestmark = pytest.mark.django_db(transaction=True)

# Measured on PostgreSQL: the conversation and its context inserted in one statement (the history), the message
# stored with its context append and the conversation's time in one statement, the context and the active messages
# read for the model's request, the usage record, the reply stored as the message was. Elsewhere (SQLite) a store is
# three statements (insert, append, touch), a conversation two. The key, the agent, its version and provider, the
# tenant: kept per process.
V1_TURN_STATEMENTS = {"postgresql": 6, "sqlite": 11}


def _client(server, secret: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=secret, max_retries=0, timeout=20)


def _ask(client: openai.OpenAI, model: str, stream: bool = False) -> str:
    answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello"}], stream=stream)
    if stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in answer if chunk.choices)
    return answer.choices[0].message.content


def _settled() -> None:
    time.sleep(0.3)  # the turn's last writes (the reply) end after the answer's last byte


@pytest.mark.parametrize("stream", [False, True])
def test_a_stateless_v1_turn_runs_a_bounded_number_of_statements(
    asgi_live_server, published, tenant_admin, make_key, scripted_llm, stream
):
    scripted_llm.set_rules({"when": {}, "reply": {"text": "hi there"}})
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    client = _client(asgi_live_server, secret)
    for _ in range(2):  # the first request learns the key's tenant, the second keeps what it reads
        _ask(client, published.solar.slug)
    _settled()
    with count_statements() as statements:
        assert _ask(client, published.solar.slug, stream=stream) == "hi there"
        _settled()
    assert 0 < len(statements) <= V1_TURN_STATEMENTS[connection.vendor], statements.sql


def _warm(server, published, secret: str) -> openai.OpenAI:
    client = _client(server, secret)
    for _ in range(2):
        _ask(client, published.solar.slug)
    return client


def _refused(client: openai.OpenAI, model: str) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as refused:
        _ask(client, model)
    return refused.value


def test_a_revoked_key_is_refused_at_the_next_request(asgi_live_server, published, tenant, tenant_admin, make_key):
    key, secret = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    client = _warm(asgi_live_server, published, secret)
    with tenant_scope(tenant):
        key_revoke(key=key)
    refused = _refused(client, published.solar.slug)
    assert (refused.status_code, refused.body["code"]) == (401, "revoked_api_key")


def test_an_agent_switched_off_or_unpublished_is_refused_at_the_next_request(
    asgi_live_server, published, tenant, tenant_admin, make_key
):
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    client = _warm(asgi_live_server, published, secret)
    with tenant_scope(tenant):
        solar = Agent.objects.get(pk=published.solar.pk)
        solar.active = False
        solar.save()
    assert _refused(client, published.solar.slug).body["code"] == "model_not_found"
    assert _ask(client, published.pv.slug)  # another agent of the tenant still answers
    with tenant_scope(tenant):
        AgentVersion.objects.filter(agent=published.pv).delete()
    assert _refused(client, published.pv.slug).body["code"] == "model_not_found"


def test_a_member_who_left_or_was_deactivated_stops_their_keys_at_once(
    asgi_live_server, published, tenant, tenant_admin, member, make_key
):
    _key, admin_secret = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    _key, member_secret = make_key(member, scopes=[KeyScope.CHAT])
    admins, members = (_warm(asgi_live_server, published, s) for s in (admin_secret, member_secret))
    Membership.objects.filter(user=member, tenant=tenant).delete()
    assert _refused(members, published.solar.slug).body["code"] == "member_left"
    user = get_user_model().objects.get(pk=tenant_admin.pk)
    user.is_active = False
    user.save(update_fields=["is_active"])
    assert _refused(admins, published.solar.slug).body["code"] == "inactive_tenant"


def test_a_change_another_process_made_is_seen_through_the_shared_generation(
    asgi_live_server, published, tenant, tenant_admin, make_key
):
    key, secret = make_key(tenant_admin, scopes=[KeyScope.CHAT])
    client = _warm(asgi_live_server, published, secret)
    # Another process revokes the key: its row changes here without this process's signals, and its bump reaches
    # this process only as a new token in the shared cache.
    with tenant_scope(tenant):
        ApiKey.objects.filter(pk=key.pk).update(revoked_at=key.created_at)
    assert _ask(client, published.solar.slug)  # this process still keeps the key as it read it
    cache.set(KEY.format(tenant.pk), "a token of another process", timeout=None)
    assert _refused(client, published.solar.slug).body["code"] == "revoked_api_key"


def test_a_memo_reads_once_per_generation_and_keeps_nothing_a_failed_read_raised(tenant):
    memo: TenantMemo[int] = TenantMemo(size=2)
    reads: list[str] = []

    def load(value: int, fail: bool = False):
        def read() -> int:
            reads.append(f"read {value}")
            if fail:
                raise RuntimeError("the database went away")
            return value

        return read

    assert memo.get(tenant.pk, "a", load(1)) == 1
    assert memo.get(tenant.pk, "a", load(2)) == 1  # kept
    before = generation(tenant.pk)
    bump(tenant.pk)
    assert generation(tenant.pk) != before
    with pytest.raises(RuntimeError):
        memo.get(tenant.pk, "a", load(3, fail=True))
    assert memo.get(tenant.pk, "a", load(4)) == 4  # read again: the failed read kept nothing
    memo.get(tenant.pk, "b", load(5))
    memo.get(tenant.pk, "c", load(6))  # over its size: starts again empty
    assert memo.get(tenant.pk, "a", load(7)) == 7
    assert reads == ["read 1", "read 3", "read 4", "read 5", "read 6", "read 7"]
    cache.delete(KEY.format(tenant.pk))  # the cache lost the token (evicted, restarted): nothing kept is trusted
    assert memo.get(tenant.pk, "a", load(8)) == 8


def test_within_one_hop_a_tenants_token_is_read_once_and_its_own_bump_seen_at_once(tenant):
    key = KEY.format(tenant.pk)
    cache.set(key, "first", timeout=None)
    with read_once():
        assert generation(tenant.pk) == "first"
        cache.set(key, "another process's", timeout=None)
        assert generation(tenant.pk) == "first"  # read once in this hop
        bump(tenant.pk)
        assert generation(tenant.pk) not in ("first", "another process's")  # this hop's own change: seen at once
    cache.set(key, "later", timeout=None)
    assert generation(tenant.pk) == "later"
