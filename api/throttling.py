"""The API's limits, kept in the cache (Redis when REDIS_URL is set, so every process counts together; in-process
otherwise): one rate per API key (API_KEY_RATE, e.g. "600/min"), for the REST API (a DRF throttle) and the
OpenAI-compatible endpoint alike, and the streamed replies a tenant may have open at once (API_TENANT_MAX_STREAMS)."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from django.core.cache import cache
from django.utils.translation import gettext as _
from rest_framework.throttling import SimpleRateThrottle

from api.keys import KeyAccess, KeyRefused, authenticate_key, bearer_secret
from core.conf import setting

# A stream's place lasts this long unless its stream renews it (every third of it): a process that dies frees its
# places within a minute.
STREAM_LEASE_SECONDS = 60
STREAM_RETRY_SECONDS = 5


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Requests per key; session requests (the pages' own use) are not counted here."""

    scope = "api_key"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        access = getattr(request, "auth", None)
        if not isinstance(access, KeyAccess):
            return None
        return self.cache_format % {"scope": self.scope, "ident": access.key.pk}


def throttle_wait(access: KeyAccess) -> float | None:
    """None when the key may make another request now, else the seconds to wait (the answer's Retry-After)."""
    throttle = ApiKeyRateThrottle()
    if throttle.allow_request(SimpleNamespace(auth=access), None):
        return None
    return max(throttle.wait() or 1.0, 1.0)


def admit(authorization: str | None, *scopes: str) -> KeyAccess:
    """The access of a request's `Authorization: Bearer` key, checked for one of `scopes` and against the key's
    rate; KeyRefused otherwise (429 with `retry_after` over the rate). For the views outside DRF."""
    access = authenticate_key(bearer_secret(authorization))
    access.require(*scopes)
    wait = throttle_wait(access)
    if wait is not None:
        raise KeyRefused(
            "rate_limit_exceeded",
            _("Too many requests with this API key. Retry in %(seconds)s s.") % {"seconds": max(1, round(wait))},
            status=429,
            retry_after=wait,
        )
    return access


@dataclass(frozen=True)
class StreamSlot:
    """One of a tenant's API_TENANT_MAX_STREAMS places for a streamed reply: a cache key holding this stream's token
    (numbered places, each taken with cache.add, so processes sharing the cache never hand out the same one)."""

    key: str
    token: str

    # The cache calls run in a worker thread of their own (asyncio.to_thread), not through Django's async cache
    # methods: those queue on the process's one thread-sensitive thread, where other work (a turn's database writes,
    # an eager task after a turn) can hold a stream's release back for seconds.
    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(STREAM_LEASE_SECONDS / 3)
            await asyncio.to_thread(cache.set, self.key, self.token, STREAM_LEASE_SECONDS)

    def release(self) -> None:
        if cache.get(self.key) == self.token:  # not a place taken by another stream after this one's lease ran out
            cache.delete(self.key)

    async def arelease(self) -> None:
        await asyncio.to_thread(self.release)


def stream_slot_take(tenant_id: int) -> StreamSlot | None:
    """A free place for one more streamed reply of the tenant, or KeyRefused (429) when all are taken; None when
    streams are not limited (API_TENANT_MAX_STREAMS 0)."""
    limit = setting("API_TENANT_MAX_STREAMS")
    if not limit:
        return None
    keys = [f"api-streams:{tenant_id}:{n}" for n in range(limit)]
    taken = cache.get_many(keys)
    token = secrets.token_hex(8)
    for key in keys:
        if key not in taken and cache.add(key, token, STREAM_LEASE_SECONDS):
            return StreamSlot(key=key, token=token)
    raise KeyRefused(
        "too_many_streams",
        _("This tenant already has %(n)s replies streaming through the API, its limit. Retry when one has ended.")
        % {"n": limit},
        status=429,
        retry_after=STREAM_RETRY_SECONDS,
    )


async def holding(slot: StreamSlot | None, chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """`chunks`, keeping the stream's place (renewed) until they end or the client leaves; then the place is free."""
    renewal = asyncio.get_running_loop().create_task(slot.renew_forever()) if slot is not None else None
    try:
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk
    finally:
        if renewal is not None:
            renewal.cancel()
        if slot is not None:
            await slot.arelease()
