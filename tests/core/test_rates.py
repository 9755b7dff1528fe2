"""Rates counted in one atomic step (core.rates): with Redis one script call per event, so concurrent requests in
several threads or processes cannot overwrite each other's counts (Django REST framework's throttle read a list of
timestamps and wrote it back: two requests at once were counted once); in-process through the cache under a lock."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import redis
from django.core.cache import caches

from api.keys import KeyAccess
from api.throttling import ApiKeyRateThrottle, throttle_wait
from core import rates

LOCAL_CACHE = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


@pytest.fixture(params=["redis", "in-process"])
def shared(request, settings):
    """The cache the rates count in: the process's Redis, or Django's in-process cache."""
    if request.param == "redis":
        request.getfixturevalue("redis_url")
    else:
        settings.CACHES = LOCAL_CACHE
    caches["default"].clear()
    yield request.param
    caches["default"].clear()


def _admitted(hit, threads: int = 8, each: int = 25) -> int:
    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(lambda _: hit() is None, range(threads * each)))


def test_a_sliding_window_admits_exactly_its_limit_under_concurrency(shared):
    name = uuid.uuid4().hex
    assert _admitted(lambda: rates.sliding_window(name, 50, 60)) == 50


def test_a_fixed_window_admits_exactly_its_limit_under_concurrency(shared):
    name = uuid.uuid4().hex
    limit = 50
    if 60 - time.time() % 60 < 5:  # the counts must fall in one window
        time.sleep(6)
    assert _admitted(lambda: rates.fixed_window(name, limit, 60)) == limit
    wait = rates.fixed_window(name, limit, 60)
    assert wait is not None and 1 <= wait <= 60


def test_an_api_keys_rate_is_not_exceeded_by_concurrent_requests(shared, monkeypatch):
    # A key's access without its rows: the throttle reads only the key's random prefix.
    granted = KeyAccess(key=SimpleNamespace(prefix=uuid.uuid4().hex[:12]), tenant=None, user=None, membership=None)
    monkeypatch.setattr(ApiKeyRateThrottle, "rate", "30/min", raising=False)
    assert _admitted(lambda: throttle_wait(granted)) == 30
    wait = throttle_wait(granted)
    assert wait is not None and 1 <= wait <= 60


def test_a_sliding_window_lets_an_event_in_once_the_oldest_leaves(shared):
    name = uuid.uuid4().hex
    before_first = time.time()
    assert rates.sliding_window(name, 2, 1) is None
    after_first = time.time()
    time.sleep(0.5)
    assert rates.sliding_window(name, 2, 1) is None
    asked = time.time()
    wait = rates.sliding_window(name, 2, 1)
    answered = time.time()
    # The first leaves 1 s after it came (the bounds: when it came and when the third asked, each within a window).
    assert wait is not None and before_first + 1 - answered <= wait <= after_first + 1 - asked
    time.sleep(wait + 0.05)
    assert rates.sliding_window(name, 2, 1) is None
    assert rates.sliding_window(name, 2, 1) is not None  # the second is still in


def test_with_redis_an_event_is_one_command_on_one_client(redis_url, monkeypatch):
    backend = caches["default"]
    client = backend.redis()
    assert backend._cache.get_client(write=False) is client  # Django's client made a new one per command
    sent: list[str] = []
    send = redis.Redis.execute_command

    def counted(self, *args, **options):
        sent.append(args[0])
        return send(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", counted)
    name = uuid.uuid4().hex
    rates.sliding_window(name, 5, 60)  # the script loaded on first use
    rates.fixed_window(name, 5, 60)
    sent.clear()
    for _ in range(10):
        rates.sliding_window(name, 5, 60)
        rates.fixed_window(name, 5, 60)
    assert sent == ["EVALSHA"] * 20
