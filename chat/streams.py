"""The frame log: numbers each frame of a conversation (`seq`) and keeps the recent ones for `catch_up`.

It also holds the two small pieces of turn state every process must see: which turn is running in a conversation
(so a resend or a second message does not start another) and whether someone asked it to stop.

Redis when settings.REDIS_URL is set (shared by every Daphne process), an in-process store otherwise (the embedded
default: one process, in-memory channel layer). See docs/stream-protocol.md.
"""

from __future__ import annotations

import json
import time
import weakref
from typing import Any

from django.conf import settings

from core.conf import setting

# How many frames of a conversation are kept for catch_up, and for how long after the last one (seconds).
MAX_FRAMES = 2000
FRAMES_TTL = 3600
# The seq counter outlives the frames, so numbers keep growing across turns of a long-lived page.
COUNTER_TTL = 30 * 24 * 3600
# A running-turn claim expires by itself if its process dies without releasing it; the running turn renews it
# (chat.turns) well within this.
TURN_TTL = 60
STOP_TTL = 60


def group_name(conversation_id: int) -> str:
    """The channel-layer group of a conversation's sockets (ASCII letters, digits, hyphens and periods only)."""
    return f"chat.conversation.{int(conversation_id)}"


class FrameLog:
    """The interface of both stores."""

    async def append(self, conversation_id: int, frame: dict[str, Any]) -> dict[str, Any]:
        """Give `frame` the conversation's next seq, keep it, and return it (with `seq`)."""
        raise NotImplementedError

    async def after(self, conversation_id: int, after_seq: int) -> list[dict[str, Any]]:
        """The kept frames whose seq is greater than `after_seq`, in order."""
        raise NotImplementedError

    async def last_seq(self, conversation_id: int) -> int:
        """The seq of the conversation's latest frame (0 before the first)."""
        raise NotImplementedError

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        """Mark turn `turn_id` (its user message id) running; None on success, else the turn already running."""
        raise NotImplementedError

    async def running_turn(self, conversation_id: int) -> int | None:
        raise NotImplementedError

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        """Push back the expiry of our own claim (a heartbeat of the running turn)."""
        raise NotImplementedError

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        raise NotImplementedError

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        raise NotImplementedError

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        raise NotImplementedError


class MemoryFrameLog(FrameLog):
    """One process: plain dicts (no awaits inside a method, so each method is atomic on the event loop)."""

    def __init__(self) -> None:
        self.counters: dict[int, int] = {}
        self.frames: dict[int, list[dict[str, Any]]] = {}
        self.turns: dict[int, tuple[int, float]] = {}
        self.stops: dict[int, int] = {}

    async def append(self, conversation_id: int, frame: dict[str, Any]) -> dict[str, Any]:
        seq = self.counters.get(conversation_id, 0) + 1
        self.counters[conversation_id] = seq
        frame = {"seq": seq, **frame}
        kept = self.frames.setdefault(conversation_id, [])
        kept.append(frame)
        del kept[:-MAX_FRAMES]
        return frame

    async def after(self, conversation_id: int, after_seq: int) -> list[dict[str, Any]]:
        return [frame for frame in self.frames.get(conversation_id, []) if frame["seq"] > after_seq]

    async def last_seq(self, conversation_id: int) -> int:
        return self.counters.get(conversation_id, 0)

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        current = await self.running_turn(conversation_id)
        if current is not None:
            return current
        self.turns[conversation_id] = (turn_id, time.monotonic() + TURN_TTL)
        self.stops.pop(conversation_id, None)
        return None

    async def running_turn(self, conversation_id: int) -> int | None:
        claim = self.turns.get(conversation_id)
        if claim is None or claim[1] < time.monotonic():
            return None
        return claim[0]

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        if self.turns.get(conversation_id, (None,))[0] == turn_id:
            self.turns[conversation_id] = (turn_id, time.monotonic() + TURN_TTL)

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        if self.turns.get(conversation_id, (None,))[0] == turn_id:
            del self.turns[conversation_id]
        if self.stops.get(conversation_id) == turn_id:
            del self.stops[conversation_id]

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        self.stops[conversation_id] = turn_id

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        return self.stops.get(conversation_id) == turn_id


# INCR the counter and add the frame in one step, so the sorted set's order is the seq order even with several
# writers; the member is "<seq> <json>" (unique per seq), scored by seq.
_APPEND = """
local seq = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], seq, seq .. ' ' .. ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[2]) + 1))
redis.call('EXPIRE', KEYS[2], ARGV[4])
return seq
"""

# Release only our own claim (a late release must not drop the next turn's).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 0
"""


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class RedisFrameLog(FrameLog):
    """Shared by every process: per conversation a seq counter (INCR), a sorted set of frames scored by seq
    (bounded to MAX_FRAMES, expiring FRAMES_TTL after the last frame), a turn claim and a stop flag."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        # redis.asyncio clients belong to the event loop that made them; one per loop.
        self._clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def _client(self) -> Any:
        import asyncio

        import redis.asyncio as redis

        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = redis.Redis.from_url(self.url, decode_responses=True)
        return client

    def _key(self, conversation_id: int, name: str) -> str:
        return f"{self.prefix}:{int(conversation_id)}:{name}"

    async def append(self, conversation_id: int, frame: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        seq = await self._client().eval(
            _APPEND,
            2,
            self._key(conversation_id, "seq"),
            self._key(conversation_id, "frames"),
            body,
            MAX_FRAMES,
            COUNTER_TTL,
            FRAMES_TTL,
        )
        return {"seq": int(seq), **frame}

    async def after(self, conversation_id: int, after_seq: int) -> list[dict[str, Any]]:
        members = await self._client().zrangebyscore(self._key(conversation_id, "frames"), f"({int(after_seq)}", "+inf")
        frames = []
        for member in members:
            seq, _, body = member.partition(" ")
            frames.append({"seq": int(seq), **json.loads(body)})
        return frames

    async def last_seq(self, conversation_id: int) -> int:
        value = await self._client().get(self._key(conversation_id, "seq"))
        return int(value or 0)

    async def claim_turn(self, conversation_id: int, turn_id: int) -> int | None:
        client = self._client()
        key = self._key(conversation_id, "turn")
        if await client.set(key, str(turn_id), nx=True, ex=TURN_TTL):
            return None
        current = await client.get(key)
        if current is None:  # released meanwhile: try once more
            return None if await client.set(key, str(turn_id), nx=True, ex=TURN_TTL) else turn_id
        return int(current)

    async def running_turn(self, conversation_id: int) -> int | None:
        value = await self._client().get(self._key(conversation_id, "turn"))
        return int(value) if value is not None else None

    async def renew_turn(self, conversation_id: int, turn_id: int) -> None:
        await self._client().eval(_RENEW, 1, self._key(conversation_id, "turn"), str(turn_id), TURN_TTL)

    async def release_turn(self, conversation_id: int, turn_id: int) -> None:
        await self._client().eval(
            _RELEASE, 2, self._key(conversation_id, "turn"), self._key(conversation_id, "stop"), str(turn_id)
        )

    async def request_stop(self, conversation_id: int, turn_id: int) -> None:
        await self._client().set(self._key(conversation_id, "stop"), str(turn_id), ex=STOP_TTL)

    async def stop_requested(self, conversation_id: int, turn_id: int) -> bool:
        return await self._client().get(self._key(conversation_id, "stop")) == str(turn_id)


_logs: dict[tuple[str, str], FrameLog] = {}
_memory_log = MemoryFrameLog()


def get_frame_log() -> FrameLog:
    """The store for this deployment: Redis when settings.REDIS_URL is set, else the process's in-memory one."""
    url = settings.REDIS_URL
    if not url:
        return _memory_log
    prefix = setting("CHAT_STREAM_PREFIX")
    key = (url, prefix)
    if key not in _logs:
        _logs[key] = RedisFrameLog(url, prefix)
    return _logs[key]
