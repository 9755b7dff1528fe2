"""One Redis client per process for the cache (core.redis_cache): under ASGI, Django makes a cache object per
request, and each opened its own connection (issue 35: a new connection and a SELECT per API request)."""

from __future__ import annotations

import httpx
import pytest
import redis
from django.core.cache import caches

from api.keys import key_create
from api.models import KeyScope
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def _connections_received(url: str) -> int:
    return int(redis.Redis.from_url(url).info("stats")["total_connections_received"])


def test_cache_objects_share_one_client(redis_url):
    made = [caches.create_connection("default") for _ in range(5)]
    assert len({id(cache._cache) for cache in made}) == 1


def test_api_requests_do_not_open_a_redis_connection_each(asgi_live_server, redis_url, tenant, tenant_admin):
    with tenant_scope(tenant):
        _key, secret = key_create(tenant=tenant, user=tenant_admin, name="k", scopes=[KeyScope.READ])
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=asgi_live_server.url, headers=headers, timeout=10) as http:
        assert http.get("/v1/models").status_code == 200  # the process's pool is open from here on
        before = _connections_received(redis_url)
        for _ in range(20):
            assert http.get("/v1/models").status_code == 200  # each checks the key's rate in the cache
    # Two for this test's own INFO calls, a little room for the pool growing under concurrency; not one per request.
    assert _connections_received(redis_url) - before <= 4
