"""Counted places kept in the shared cache (Redis when REDIS_URL is set, so every process counts together;
in-process otherwise): a tenant's streamed API replies open at once (API_TENANT_MAX_STREAMS). Rates (members'
messages, new website visitors) are core.rates'."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

from django.core.cache import cache

# A stream's place lasts this long unless its stream renews it (every third of it): a process that dies frees its
# places within a minute.
STREAM_LEASE_SECONDS = 60
STREAM_RETRY_SECONDS = 5
# Releases under way, referenced until they are done (a shielded task outlives the task that awaited it).
_releasing: set[asyncio.Future] = set()


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
        # Shielded: a request's task is cancelled when its client disconnects, which the openai SDK does as soon as it
        # has read `data: [DONE]`, often while this release still waits for a worker thread; cancelling the wait
        # would drop the thread's job, and the place would stay taken until its lease ran out (a false
        # too_many_streams for up to a minute; the flaky test_l6 under load).
        release = asyncio.ensure_future(asyncio.to_thread(self.release))
        _releasing.add(release)
        release.add_done_callback(_releasing.discard)
        await asyncio.shield(release)


def stream_slot_take(tenant_id: int, limit: int) -> StreamSlot | None:
    """A free place for one more streamed reply of the tenant; None when all `limit` are taken."""
    keys = [f"api-streams:{tenant_id}:{n}" for n in range(limit)]
    taken = cache.get_many(keys)
    token = secrets.token_hex(8)
    for key in keys:
        if key not in taken and cache.add(key, token, STREAM_LEASE_SECONDS):
            return StreamSlot(key=key, token=token)
    return None


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
