"""Django's Redis cache with one client (and so one connection pool) per process: Django makes a cache object per
request context under ASGI, and each made its own pool, so every request opened a new Redis connection (and sent
a SELECT for its database) before its first command. The pools of redis-py are thread-safe and reopen after a fork.

Django's client also built a new `redis.Redis` object for every command (its response-callback table copied each
time: about a tenth of an API request's cache work); here each pool has one, made once (redis-py's clients are
thread-safe: each command takes a connection from the pool)."""

from __future__ import annotations

import threading
from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[tuple, RedisCacheClient] = {}
_lock = threading.Lock()


class OneClientPerPool(RedisCacheClient):
    """RedisCacheClient that keeps the `redis.Redis` it makes for a connection pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._made: dict[int, redis.Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> redis.Redis:
        pool = self._get_connection_pool(write)
        client = self._made.get(id(pool))
        if client is None:
            with _lock:
                client = self._made.setdefault(id(pool), self._client(connection_pool=pool))
        return client


class SharedRedisCache(RedisCache):
    """RedisCache whose client is shared by every cache object of the process with the same servers and options."""

    @cached_property
    def _cache(self) -> Any:
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        client = _clients.get(key)
        if client is None:
            with _lock:
                client = _clients.setdefault(key, OneClientPerPool(self._servers, **self._options))
        return client

    def redis(self) -> redis.Redis:
        """The process's client for the cache's (first) server, for a command the cache API has not (a script)."""
        return self._cache.get_client(write=True)
