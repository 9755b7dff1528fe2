"""One value per running event loop: what asyncio objects (futures, tasks, connection pools, Redis clients) may not
be shared across loops. Daphne runs one loop per process; tests, Celery tasks (async_to_sync) and worker threads run
others, and each must get its own.

    gates = LoopScoped(TurnGate)
    gates.get()      # this loop's gate, made by the factory the first time the loop asks

The loops are held weakly: a loop that is gone takes its value with it, and a loop that is closed gives its value up
the next time a value is made for another loop (a test's loop may be closed yet still referenced).
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def _no_loop() -> None:
    return None


class _LastLoop(threading.local):
    """Per thread: a weak reference to the loop `running_loop` last found running."""

    def __init__(self) -> None:
        self.loop: Callable[[], asyncio.AbstractEventLoop | None] = _no_loop


_last = _LastLoop()


def running_loop() -> asyncio.AbstractEventLoop:
    """`asyncio.get_running_loop()` without a system call on every call.

    CPython 3.11's `get_running_loop` asks the kernel for the process id each time (a loop inherited through a fork
    is not running in the child). Where system calls are dear (a container on a user-space kernel, as this project's
    benchmark machine) that was 13-15 % of a Daphne process's CPU with 200 replies streaming: three calls per token.
    Here the loop this thread last asked for is kept (weakly: a loop that is gone is not held), and is the answer
    while it runs in this thread (a thread runs one loop at a time; asyncio sets `_thread_id` for as long as
    `run_forever` runs); a fork forgets it. A loop without `_thread_id` (not asyncio's own) is asked for every time.
    Raises RuntimeError outside a running loop."""
    loop = _last.loop()
    if loop is not None and getattr(loop, "_thread_id", None) == threading.get_ident():
        return loop
    loop = asyncio.get_running_loop()
    _last.loop = weakref.ref(loop)
    return loop


def _forget_after_fork() -> None:
    _last.loop = _no_loop


os.register_at_fork(after_in_child=_forget_after_fork)


class LoopScoped(Generic[T]):
    """A value per event loop, made by `factory` when a running loop first asks for it (`get`)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self.factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        """The running loop's value, made now if it has none (raises RuntimeError outside a running loop)."""
        loop = running_loop()
        try:
            return self._values[loop]
        except KeyError:
            pass
        self._release_closed()
        value = self._values[loop] = self.factory()
        return value

    def peek(self) -> T | None:
        """The running loop's value if one was made, else None (nothing is made)."""
        return self._values.get(running_loop())

    def values(self) -> Iterator[T]:
        """The values of the loops that still have one."""
        return iter(list(self._values.values()))

    def __len__(self) -> int:
        return len(self._values)

    def _release_closed(self) -> None:
        for loop in [loop for loop in list(self._values.keys()) if loop.is_closed()]:
            self._values.pop(loop, None)
