"""Rates counted in the shared cache, each event in one atomic step: with Redis (REDIS_URL set, every process counts
together) one script call per event, so concurrent requests of several processes cannot overwrite each other's
counts; in-process otherwise (the embedded default runs one process), through the cache API under a lock.

Two kinds of window: `fixed_window` (a count per window of whole `seconds`: members' messages, new visitors) and
`sliding_window` (at most `limit` events in any `seconds`: an API key's requests, as Django REST framework's
throttles count them, without their read-modify-write of a pickled list of timestamps per request)."""

from __future__ import annotations

import math
import secrets
import threading
import time
from typing import Any

from django.core.cache import cache, caches
from redis.commands.core import Script

from core.redis_cache import SharedRedisCache

# KEYS[1]: the window's counter; ARGV: limit, seconds to keep the counter. The new count, or 0 when over the limit
# (the event not counted).
_FIXED = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if count > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return 0
end
return count
"""

# KEYS[1]: a sorted set of the events' times; ARGV: now, seconds, limit, a unique member. Nothing when the event is
# counted, else the seconds until the oldest event leaves the window (the event not counted).
_SLIDING = """
local now = tonumber(ARGV[1])
local seconds = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - seconds)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tostring(tonumber(oldest[2]) + seconds - now)
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('EXPIRE', KEYS[1], math.ceil(seconds) + 1)
return false
"""

_scripts: dict[tuple[int, str], Script] = {}
_local = threading.Lock()  # the in-process path's read-modify-write


def _script(source: str) -> Script | None:
    """The script on the process's Redis client; None when the cache is not Redis."""
    backend = caches["default"]
    if not isinstance(backend, SharedRedisCache):
        return None
    client = backend.redis()
    found = _scripts.get((id(client), source))
    if found is None:
        found = _scripts.setdefault((id(client), source), client.register_script(source))
    return found


def fixed_window(name: str, limit: int, seconds: int) -> int | None:
    """Count one more event of `name` in the current fixed window of `seconds`; the seconds until the window ends
    when that makes more than `limit` (the event is not counted), else None. `limit` 0: no limit."""
    if not limit:
        return None
    now = time.time()
    window = int(now // seconds)
    key = f"rate:{name}:{window}"
    script = _script(_FIXED)
    if script is not None:
        over = script(keys=[cache.make_key(key)], args=[limit, seconds + 5]) == 0
    else:
        over = _fixed_in_process(key, limit, seconds)
    return max(1, int((window + 1) * seconds - now)) if over else None


def _fixed_in_process(key: str, limit: int, seconds: int) -> bool:
    with _local:
        count = cache.get(key, 0) + 1
        if count > limit:
            return True
        cache.set(key, count, seconds + 5)
        return False


def sliding_window(name: str, limit: int, seconds: float) -> float | None:
    """Count one more event of `name` unless `limit` were counted in the last `seconds`: None when counted, else
    the seconds until one leaves the window (at least a tiny positive number)."""
    now = time.time()
    key = f"rate-sliding:{name}"
    script = _script(_SLIDING)
    if script is not None:
        wait: Any = script(keys=[cache.make_key(key)], args=[repr(now), seconds, limit, secrets.token_hex(6)])
        return None if wait is None else max(float(wait), 1e-3)
    with _local:
        times = [t for t in cache.get(key, []) if t > now - seconds]
        if len(times) >= limit:
            return max(min(times) + seconds - now, 1e-3)
        times.append(now)
        cache.set(key, times, math.ceil(seconds) + 1)
        return None
