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
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopScoped(Generic[T]):
    """A value per event loop, made by `factory` when a running loop first asks for it (`get`)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self.factory = factory
        self._values: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = weakref.WeakKeyDictionary()

    def get(self) -> T:
        """The running loop's value, made now if it has none (raises RuntimeError outside a running loop)."""
        loop = asyncio.get_running_loop()
        try:
            return self._values[loop]
        except KeyError:
            pass
        self._release_closed()
        value = self._values[loop] = self.factory()
        return value

    def peek(self) -> T | None:
        """The running loop's value if one was made, else None (nothing is made)."""
        return self._values.get(asyncio.get_running_loop())

    def values(self) -> Iterator[T]:
        """The values of the loops that still have one."""
        return iter(list(self._values.values()))

    def __len__(self) -> int:
        return len(self._values)

    def _release_closed(self) -> None:
        for loop in [loop for loop in list(self._values.keys()) if loop.is_closed()]:
            self._values.pop(loop, None)
