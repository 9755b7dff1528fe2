"""core.loopscoped: `LoopScoped`, one value per running event loop, made by its factory, released with its loop;
`running_loop`, the running loop without a system call per call."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest

from core import loopscoped
from core.loopscoped import LoopScoped, running_loop


class Thing:
    """A value a weak reference can follow."""


def test_one_loop_gets_one_value_made_once():
    made: list[Thing] = []

    def factory() -> Thing:
        made.append(Thing())
        return made[-1]

    scoped = LoopScoped(factory)

    async def twice() -> tuple[Thing, Thing]:
        first = scoped.get()
        await asyncio.sleep(0)
        return first, scoped.get()

    first, second = asyncio.run(twice())
    assert first is second
    assert len(made) == 1


def test_two_loops_get_two_values():
    scoped = LoopScoped(Thing)

    async def value() -> Thing:
        return scoped.get()

    first_loop, second_loop = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first = first_loop.run_until_complete(value())
        second = second_loop.run_until_complete(value())
        assert first is not second
        assert first_loop.run_until_complete(value()) is first  # each loop keeps its own
        assert len(scoped) == 2
    finally:
        first_loop.close()
        second_loop.close()


def test_peek_makes_nothing():
    scoped = LoopScoped(Thing)

    async def peek_then_get() -> tuple[Thing | None, Thing, Thing | None]:
        before = scoped.peek()
        made = scoped.get()
        return before, made, scoped.peek()

    before, made, after = asyncio.run(peek_then_get())
    assert before is None
    assert after is made


def test_a_closed_loop_gives_its_value_up_even_while_referenced():
    scoped = LoopScoped(Thing)

    async def value() -> Thing:
        return scoped.get()

    old_loop = asyncio.new_event_loop()
    released = weakref.ref(old_loop.run_until_complete(value()))
    old_loop.close()  # still referenced here (as a test runner's loop may be)
    new_loop = asyncio.new_event_loop()
    try:
        kept = new_loop.run_until_complete(value())  # another loop's value is made: the closed loop's is dropped
        gc.collect()
        assert released() is None
        assert list(scoped.values()) == [kept]
    finally:
        new_loop.close()
    assert old_loop.is_closed()


def test_a_loop_that_is_gone_takes_its_value_with_it():
    scoped = LoopScoped(Thing)

    async def value() -> Thing:
        return scoped.get()

    loop = asyncio.new_event_loop()
    released = weakref.ref(loop.run_until_complete(value()))
    loop.close()
    del loop
    gc.collect()
    assert released() is None
    assert len(scoped) == 0


def test_outside_a_running_loop_it_refuses():
    scoped = LoopScoped(Thing)
    with pytest.raises(RuntimeError):
        scoped.get()


def test_running_loop_is_the_running_loop_asked_for_once_per_loop(monkeypatch):
    asked: list[asyncio.AbstractEventLoop] = []
    real = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        asked.append(real())
        return asked[-1]

    monkeypatch.setattr(loopscoped.asyncio, "get_running_loop", counted)

    async def three_times() -> list[asyncio.AbstractEventLoop]:
        seen = [running_loop()]
        await asyncio.sleep(0)
        return [*seen, running_loop(), running_loop(), real()]

    first = asyncio.run(three_times())
    assert first[0] is first[1] is first[2] is first[3]
    second = asyncio.run(three_times())  # a new loop in the same thread: asked for again, not the old one
    assert second[0] is second[3] and second[0] is not first[0]
    assert len(asked) == 2


def test_running_loop_follows_each_thread_and_raises_outside_a_loop():
    async def mine() -> asyncio.AbstractEventLoop:
        assert running_loop() is asyncio.get_running_loop()
        return running_loop()

    here = asyncio.run(mine())
    there: list[asyncio.AbstractEventLoop] = []
    thread = threading.Thread(target=lambda: there.append(asyncio.run(mine())))
    thread.start()
    thread.join()
    assert there and there[0] is not here
    with pytest.raises(RuntimeError):
        running_loop()  # the loop it last saw has stopped: outside any loop, as asyncio says


def test_running_loop_does_not_keep_a_loop_alive():
    async def remember() -> weakref.ref:
        return weakref.ref(running_loop())

    gone = asyncio.run(remember())
    gc.collect()
    assert gone() is None
