"""Tests that count against a rate: the limits count in fixed windows (core.rates.fixed_window), so two messages
a test expects in one window must not straddle a window's end (seen once in CI: the first at 12:06:59.3, the second
at 12:07:00.2, and the second was admitted)."""

import asyncio
import time

ROOM = 15.0  # seconds a test's counted messages may take


async def inside_one_window(seconds: int = 60, room: float = ROOM) -> None:
    """Wait, when fewer than `room` seconds are left of the current window of `seconds`, until the next begins."""
    left = seconds - time.time() % seconds
    if left < room:
        await asyncio.sleep(left + 0.05)
