"""core.loopscoped.LoopScoped: one value per running event loop, made by its factory, released with its loop."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from core.loopscoped import LoopScoped


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
