"""Django's Redis cache with one client (and so one connection pool) per process: Django makes a cache object per
request context under ASGI, and each made its own pool, so every request opened a new Redis connection (and sent
a SELECT for its database) before its first command. The pools of redis-py are thread-safe and reopen after a fork."""

from __future__ import annotations

import threading
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from django.utils.functional import cached_property

_clients: dict[tuple, RedisCacheClient] = {}
_lock = threading.Lock()


class SharedRedisCache(RedisCache):
    """RedisCache whose client is shared by every cache object of the process with the same servers and options."""

    @cached_property
    def _cache(self) -> Any:
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        client = _clients.get(key)
        if client is None:
            with _lock:
                client = _clients.setdefault(key, self._class(self._servers, **self._options))
        return client
