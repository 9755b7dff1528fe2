"""The frame log: numbers each frame of a conversation (`seq`), keeps the recent ones for `catch_up`, and publishes
every frame it numbers to the sockets of every process (engine.bus delivers them).

It also holds the two small pieces of turn state every process must see: which turn is running in a conversation
(so a resend or a second message does not start another; a lease its process renews, so a turn whose process died is
found and ended by another: engine.interrupted.end_interrupted_turns) and whether someone asked it to stop (a flag,
and a stop message on the same bus so the running turn hears it at once).

Redis when settings.REDIS_URL is set (shared by every Daphne process and Celery worker; numbering, keeping and
publishing a whole batch of frames is one script call), an in-process store otherwise (the embedded default: one
process). See docs/stream-protocol.md and docs/operations.md ("Under load").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction

from agents import frames
from core.conf import setting
from core.loopscoped import LoopScoped

logger = logging.getLogger("engine.streams")

# How many frames of a conversation are kept for catch_up, and for how long after the last one (seconds).
MAX_FRAMES = 2000
FRAMES_TTL = 3600
# The seq counter outlives the frames, so numbers keep growing across turns of a long-lived page.
COUNTER_TTL = 30 * 24 * 3600
STOP_TTL = 60


def turn_lease_seconds() -> int:
    """How long a running turn's claim lasts unless renewed (CHAT_TURN_LEASE_SECONDS): the running turn renews it
    six times as often (engine.turns); a process that died stops renewing, and once it has run out another process ends
    the turn as interrupted (engine.interrupted.end_interrupted_turns)."""
    return max(1, int(setting("CHAT_TURN_LEASE_SECONDS")))


def frame_body(frame: frames.Frame) -> str:
    """A frame (without its seq) as the JSON text the log keeps and the bus carries: one line, no spaces, `type`
    first (frames.is_error_body relies on it)."""
    return json.dumps(frame.as_dict(), ensure_ascii=False, separators=(",", ":"))


# What the bus carries, one message per written batch: lines "F <conversation> <seq> <frame json>" (frame JSON has
# no raw newline), or one line "S <conversation> <turn>" for a stop request.
Batch = list[tuple[int, list[str]]]


class FrameLog:
    """The interface of both stores."""

    async def append(self, conversation_id: int, frame: dict[str, Any]) -> dict[str, Any]:
        """Give `frame` the conversation's next seq, keep it, publish it, and return it (with `seq`)."""
        (first,) = await self.append_batch([(conversation_id, [frame_body(frame)])])
        return {"seq": first, **frame}

    async def append_batch(self, batch: Batch) -> list[int]:
        """Number, keep and publish frames of several conversations at once (frame bodies from `frame_body`, in
        order per conversation); the first seq given to each conversation's frames, in batch order."""
        raise NotImplementedError

    def subscribe(self, feed: Callable[[str], None]) -> Callable[[], None]:
        """Call `feed(message)` with every bus message of every process (from the event loop that subscribed);
        returns the unsubscribe function. The Redis store also calls `feed("R")` after it reconnected: frames
        may have been missed meanwhile (they are in the log)."""
        raise NotImplementedError

    async def subscribed(self) -> None:
        """Return once this event loop's subscription receives what is published from now on."""

    async def after(self, conversation_id: int, after_seq: int) -> list[frames.Logged]:
        """The kept frames whose seq is greater than `after_seq`, in order, typed (frames.parse)."""
        raise NotImplementedError

    async def last_seq(self, conversation_id: int) -> int:
        """The seq of the conversation's latest frame (0 before the first)."""
        raise NotImplementedError

    async def state(self, conversation_id: int) -> tuple[int, int | None]:
        """`last_seq` and `running_turn` together (what a socket needs at connect; one round trip in Redis)."""
        return await self.last_seq(conversation_id), await self.running_turn(conversation_id)

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        """Mark turn `turn_id` (its user message id) running; None on success, else the turn already running (or a
        turn whose process died and that nobody has ended yet: `adopt_orphans`)."""
        raise NotImplementedError

    async def running_turn(self, conversation_id: int) -> int | None:
        raise NotImplementedError

    async def is_free(self, conversation_id: int) -> bool:
        """No turn of the conversation runs, and none whose process died waits to be ended: a read only (nothing
        is claimed or adopted). What admission asks before it stores a message in its own database hop."""
        return await self.running_turn(conversation_id) is None

    async def running_or_adopted(self, conversation_id: int) -> tuple[int | None, int | None]:
        """(the running turn, None), or when none runs (None, the turn of the conversation whose process died, now
        claimed for the caller: `adopt_orphans`; None when there is none). What a new message asks before it is
        stored."""
        running = await self.running_turn(conversation_id)
        if running is not None or not self.shared:
            return running, None
        adopted = await self.adopt_orphans([conversation_id])
        return None, adopted[0][1] if adopted else None

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        """Push back the expiry of our own claim (a heartbeat of the running turn)."""
        raise NotImplementedError

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        raise NotImplementedError

    async def adopt_orphans(self, conversation_ids: list[int]) -> list[tuple[int, int]]:
        """Claim, for the caller, the turns of these conversations whose process died: claimed, never released, and
        their lease ran out. Returns (conversation, turn) pairs; the caller ends each turn, then releases it."""
        raise NotImplementedError

    # Whether turns can outlive the process that runs them in this store (so `adopt_orphans` can find any).
    shared = False

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        """Set the stop flag of the turn (read by a turn that starts listening late) and publish a stop message."""
        raise NotImplementedError

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        raise NotImplementedError

    async def access_changed(self, user_id: int, tenant_id: int) -> None:
        """Tell every process that the user's place in the tenant changed (removed, or another role): their open
        sockets of that tenant close, and a reconnect checks access again."""
        raise NotImplementedError


class MemoryFrameLog(FrameLog):
    """One process: plain dicts (no awaits inside a method, so each method is atomic on the event loop). Turns may
    run on another thread's loop (a Celery task in eager mode): the bus hands messages to each subscriber's loop."""

    def __init__(self) -> None:
        self.counters: dict[int, int] = {}
        self.frames: dict[int, list[frames.Logged]] = {}
        self.turns: dict[int, tuple[int, float]] = {}
        self.stops: dict[int, int] = {}
        self.feeds: dict[int, tuple[asyncio.AbstractEventLoop, Callable[[str], None]]] = {}
        self.lock = threading.Lock()

    async def append_batch(self, batch: Batch) -> list[int]:
        firsts, lines = [], []
        with self.lock:
            for conversation_id, bodies in batch:
                first = self.counters.get(conversation_id, 0) + 1
                self.counters[conversation_id] = first + len(bodies) - 1
                kept = self.frames.setdefault(conversation_id, [])
                for seq, body in enumerate(bodies, start=first):
                    kept.append(frames.Logged(seq, frames.parse(body)))
                    lines.append(f"F {conversation_id} {seq} {body}")
                del kept[:-MAX_FRAMES]
                firsts.append(first)
        self._publish("\n".join(lines))
        return firsts

    def _publish(self, message: str) -> None:
        for loop, feed in list(self.feeds.values()):
            if loop.is_closed():
                continue
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                feed(message)
            else:
                loop.call_soon_threadsafe(feed, message)

    def subscribe(self, feed: Callable[[str], None]) -> Callable[[], None]:
        key = id(feed)
        self.feeds[key] = (asyncio.get_running_loop(), feed)
        return lambda: self.feeds.pop(key, None)

    async def after(self, conversation_id: int, after_seq: int) -> list[frames.Logged]:
        return [logged for logged in self.frames.get(conversation_id, []) if logged.seq > after_seq]

    async def last_seq(self, conversation_id: int) -> int:
        return self.counters.get(conversation_id, 0)

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        current = await self.running_turn(conversation_id)
        if current is not None:
            return current
        self.turns[conversation_id] = (turn_id, time.monotonic() + turn_lease_seconds())
        self.stops.pop(conversation_id, None)
        return None

    async def running_turn(self, conversation_id: int) -> int | None:
        claim = self.turns.get(conversation_id)
        if claim is None or claim[1] < time.monotonic():
            return None
        return claim[0]

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        if self.turns.get(conversation_id, (None,))[0] == turn_id:
            self.turns[conversation_id] = (turn_id, time.monotonic() + turn_lease_seconds())

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        if self.turns.get(conversation_id, (None,))[0] == turn_id:
            del self.turns[conversation_id]
        if self.stops.get(conversation_id) == turn_id:
            del self.stops[conversation_id]

    async def adopt_orphans(self, conversation_ids: list[int]) -> list[tuple[int, int]]:
        return []  # the store lives and dies with the one process that runs every turn: nothing outlives it

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        self.stops[conversation_id] = turn_id
        self._publish(f"S {conversation_id} {turn_id}")

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        return self.stops.get(conversation_id) == turn_id

    async def access_changed(self, user_id: int, tenant_id: int) -> None:
        self._publish(f"K {int(user_id)} {int(tenant_id)}")


# One call for a whole batch: per conversation (KEYS: its counter, its sorted set) INCRBY the counter by its frame
# count and add the frames, so the sorted set's order is the seq order even with several writers (the member is
# "<seq> <json>", unique per seq, scored by seq); then one PUBLISH of every frame to the bus. ARGV: max frames,
# counter TTL, frames TTL, bus channel, then per conversation its id, its frame count and its frame bodies.
_APPEND_BATCH = """
local max, counter_ttl, frames_ttl, channel = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local lines, firsts, a = {}, {}, 5
for k = 1, #KEYS, 2 do
  local conversation, n = ARGV[a], tonumber(ARGV[a + 1])
  a = a + 2
  local first = redis.call('INCRBY', KEYS[k], n) - n + 1
  redis.call('EXPIRE', KEYS[k], counter_ttl)
  local members = {}
  for j = 0, n - 1 do
    local seq = first + j
    members[#members + 1] = seq
    members[#members + 1] = seq .. ' ' .. ARGV[a + j]
    lines[#lines + 1] = 'F ' .. conversation .. ' ' .. seq .. ' ' .. ARGV[a + j]
  end
  a = a + n
  for m = 1, #members, 2000 do
    redis.call('ZADD', KEYS[k + 1], unpack(members, m, math.min(m + 1999, #members)))
  end
  redis.call('ZREMRANGEBYRANK', KEYS[k + 1], 0, -(max + 1))
  redis.call('EXPIRE', KEYS[k + 1], frames_ttl)
  firsts[#firsts + 1] = first
end
redis.call('PUBLISH', channel, table.concat(lines, '\\n'))
return firsts
"""

# A claim is two keys: `turn` (the lease: expires unless renewed) and `open` (the same turn id, kept until the turn is
# released). A new turn is refused while either holds another turn: `open` without `turn` is a turn whose process died,
# which must be ended (adopt) before the next one starts. KEYS: turn, open; ARGV: turn id, lease, open's expiry.
# Returns nothing on success, else the turn in the way.
_CLAIM = """
local current = redis.call('GET', KEYS[1])
if current then return current end
local open = redis.call('GET', KEYS[2])
if open and open ~= ARGV[1] then return open end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1], 'EX', ARGV[3])
return false
"""

# Release only our own claim (a late release must not drop the next turn's). KEYS: turn, stop, open.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return 0
"""

# For each conversation (KEYS: its turn and open keys, in pairs): a turn still open whose lease is gone belonged to a
# process that died; take a fresh lease on it for the caller. Returns (pair position, turn id) for each one taken.
_ADOPT = """
local adopted = {}
for k = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[k]) == 0 then
    local open = redis.call('GET', KEYS[k + 1])
    if open then
      redis.call('SET', KEYS[k], open, 'EX', ARGV[1])
      adopted[#adopted + 1] = (k + 1) / 2
      adopted[#adopted + 1] = open
    end
  end
end
return adopted
"""

# `running_turn` and, when none runs, `_ADOPT` of the one conversation, in one call. KEYS: turn, open; ARGV: lease.
# Returns {} (free), {"R", running turn} or {"A", adopted turn}.
_RUNNING_OR_ADOPT = """
local current = redis.call('GET', KEYS[1])
if current then return {'R', current} end
local open = redis.call('GET', KEYS[2])
if open then
  redis.call('SET', KEYS[1], open, 'EX', ARGV[1])
  return {'A', open}
end
return {}
"""


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class RedisFrameLog(FrameLog):
    """Shared by every process: per conversation a seq counter (INCR), a sorted set of frames scored by seq
    (bounded to MAX_FRAMES, expiring FRAMES_TTL after the last frame), a turn claim (a lease, and an open mark kept
    until the release) and a stop flag; and one
    pub/sub channel, the bus, that carries every frame and stop request to every process."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self.channel = f"{prefix}:bus"
        # redis.asyncio clients belong to the event loop that made them: per loop, one client on one bounded pool
        # (a full pool waits for a connection instead of failing the turn) and one subscriber.
        self._clients: LoopScoped[Any] = LoopScoped(lambda: redis_client(url))
        self._subscribers: LoopScoped[_Subscriber] = LoopScoped(lambda: _Subscriber(url, self.channel))

    def _client(self) -> Any:
        return self._clients.get()

    def _key(self, conversation_id: int, name: str) -> str:
        return f"{self.prefix}:{int(conversation_id)}:{name}"

    async def append_batch(self, batch: Batch) -> list[int]:
        keys: list[str] = []
        args: list[Any] = [MAX_FRAMES, COUNTER_TTL, FRAMES_TTL, self.channel]
        for conversation_id, bodies in batch:
            keys += [self._key(conversation_id, "seq"), self._key(conversation_id, "frames")]
            args += [int(conversation_id), len(bodies), *bodies]
        firsts = await self._client().eval(_APPEND_BATCH, len(keys), *keys, *args)
        return [int(first) for first in firsts]

    def subscribe(self, feed: Callable[[str], None]) -> Callable[[], None]:
        return self._subscribers.get().add(feed)

    async def subscribed(self) -> None:
        subscriber = self._subscribers.peek()
        if subscriber is not None and not subscriber.ready.is_set():
            try:
                await asyncio.wait_for(subscriber.ready.wait(), setting("REDIS_POOL_TIMEOUT"))
            except TimeoutError:  # go on: the socket's catch-up reads the log; the bus resyncs it once back
                logger.warning("bus %s: not subscribed yet, going on without waiting", self.channel)

    async def after(self, conversation_id: int, after_seq: int) -> list[frames.Logged]:
        members = await self._client().zrangebyscore(self._key(conversation_id, "frames"), f"({int(after_seq)}", "+inf")
        logged = []
        for member in members:
            seq, _, body = member.partition(" ")
            logged.append(frames.Logged(int(seq), frames.parse(body)))
        return logged

    async def last_seq(self, conversation_id: int) -> int:
        value = await self._client().get(self._key(conversation_id, "seq"))
        return int(value or 0)

    async def state(self, conversation_id: int) -> tuple[int, int | None]:
        seq, turn = await self._client().mget(self._key(conversation_id, "seq"), self._key(conversation_id, "turn"))
        return int(seq or 0), int(turn) if turn is not None else None

    shared = True
    # How many conversations one adopt script call looks at.
    ADOPT_BATCH = 500

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        keys = (self._key(conversation_id, "turn"), self._key(conversation_id, "open"))
        current = await self._client().eval(_CLAIM, 2, *keys, str(turn_id), turn_lease_seconds(), COUNTER_TTL)
        return int(current) if current is not None else None

    async def running_turn(self, conversation_id: int) -> int | None:
        value = await self._client().get(self._key(conversation_id, "turn"))
        return int(value) if value is not None else None

    async def is_free(self, conversation_id: int) -> bool:
        # Neither a claim nor an open mark (a turn that died keeps its open mark until it is ended).
        return not await self._client().exists(self._key(conversation_id, "turn"), self._key(conversation_id, "open"))

    async def running_or_adopted(self, conversation_id: int) -> tuple[int | None, int | None]:
        keys = (self._key(conversation_id, "turn"), self._key(conversation_id, "open"))
        found = await self._client().eval(_RUNNING_OR_ADOPT, 2, *keys, turn_lease_seconds())
        if not found:
            return None, None
        return (int(found[1]), None) if found[0] == "R" else (None, int(found[1]))

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        await self._client().eval(_RENEW, 1, self._key(conversation_id, "turn"), str(turn_id), turn_lease_seconds())

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        keys = [self._key(conversation_id, name) for name in ("turn", "stop", "open")]
        await self._client().eval(_RELEASE, 3, *keys, str(turn_id))

    async def adopt_orphans(self, conversation_ids: list[int]) -> list[tuple[int, int]]:
        adopted: list[tuple[int, int]] = []
        for start in range(0, len(conversation_ids), self.ADOPT_BATCH):
            batch = conversation_ids[start : start + self.ADOPT_BATCH]
            keys = [self._key(c, name) for c in batch for name in ("turn", "open")]
            found = await self._client().eval(_ADOPT, len(keys), *keys, turn_lease_seconds())
            adopted += [(batch[int(found[n]) - 1], int(found[n + 1])) for n in range(0, len(found), 2)]
        return adopted

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        client = self._client()
        await client.set(self._key(conversation_id, "stop"), str(turn_id), ex=STOP_TTL)
        await client.publish(self.channel, f"S {int(conversation_id)} {int(turn_id)}")

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        return await self._client().get(self._key(conversation_id, "stop")) == str(turn_id)

    async def access_changed(self, user_id: int, tenant_id: int) -> None:
        await self._client().publish(self.channel, f"K {int(user_id)} {int(tenant_id)}")


def redis_client(url: str) -> Any:
    """An asyncio Redis client on a bounded pool (REDIS_MAX_CONNECTIONS; a caller waits up to REDIS_POOL_TIMEOUT
    for a free connection instead of failing), with keepalive and a command timeout well above any wait we use."""
    import redis.asyncio as redis  # noqa: PLC0415 - redis.asyncio only where a Redis frame log is configured

    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=setting("REDIS_MAX_CONNECTIONS"),
        timeout=setting("REDIS_POOL_TIMEOUT"),
        socket_timeout=setting("REDIS_SOCKET_TIMEOUT"),
        socket_connect_timeout=setting("REDIS_SOCKET_TIMEOUT"),
        socket_keepalive=True,
        health_check_interval=30,
        decode_responses=True,
    )
    return redis.Redis(connection_pool=pool)


class _Subscriber:
    """One event loop's subscription to the bus: a task that reads the channel and hands each message to the feeds;
    after a lost connection it subscribes again and tells every feed ("R"): they catch up from the log."""

    RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)

    def __init__(self, url: str, channel: str) -> None:
        self.url = url
        self.channel = channel
        self.feeds: dict[int, Callable[[str], None]] = {}
        self.ready = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"bus {channel}")

    def add(self, feed: Callable[[str], None]) -> Callable[[], None]:
        key = id(feed)
        self.feeds[key] = feed
        return lambda: self.feeds.pop(key, None)

    def _feed(self, message: str) -> None:
        for feed in list(self.feeds.values()):
            try:
                feed(message)
            except Exception:  # one socket's bug must not stop the bus for the others
                logger.exception("bus feed failed")

    async def _run(self) -> None:
        import redis.asyncio as redis  # noqa: PLC0415 - redis.asyncio only where a Redis frame log is configured

        failures = 0
        while True:
            # Its own connection, no read timeout: a quiet bus is normal (keepalive notices a dead peer).
            client = redis.Redis.from_url(self.url, decode_responses=True, socket_keepalive=True)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                if failures:
                    self._feed("R")
                    logger.warning("bus %s: subscribed again after %s failure(s)", self.channel, failures)
                failures = 0
                self.ready.set()
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._feed(message["data"])
            except asyncio.CancelledError:
                raise
            except Exception:
                self.ready.clear()
                delay = self.RETRY_SECONDS[min(failures, len(self.RETRY_SECONDS) - 1)]
                failures += 1
                logger.warning("bus %s: connection lost, retrying in %ss", self.channel, delay, exc_info=True)
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
                    await client.aclose()


_logs: dict[tuple[str, str], FrameLog] = {}


def get_frame_log() -> FrameLog:
    """The store for this deployment: Redis when settings.REDIS_URL is set, else an in-memory one of this process.
    Either is one per CHAT_STREAM_PREFIX: a new prefix starts an empty log (tests give each test its own), and the
    log of an earlier prefix keeps its frames and its subscribers (each event loop's hub stays on it)."""
    url = settings.REDIS_URL or ""
    key = (url, setting("CHAT_STREAM_PREFIX"))
    log = _logs.get(key)
    if log is None:
        log = _logs.setdefault(key, RedisFrameLog(url, key[1]) if url else MemoryFrameLog())
    return log


def membership_changed(sender: Any, instance: Any, created: bool = False, **kwargs: Any) -> None:
    """Signal receiver (chat.apps): once the change commits, tell every process to close the user's sockets of the
    tenant. A new membership changes nothing for sockets that could not exist."""
    if created:
        return
    user_id, tenant_id = instance.user_id, instance.tenant_id

    def announce() -> None:
        try:
            async_to_sync(get_frame_log().access_changed)(user_id, tenant_id)
        except Exception:  # the change is stored; sockets then close at their next reconnect at the latest
            logger.warning(
                "could not announce a membership change user=%s tenant=%s", user_id, tenant_id, exc_info=True
            )

    transaction.on_commit(announce)
