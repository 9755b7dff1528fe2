"""A line of background threads for the embedded default (Celery eager, no worker): work a task would do on a
worker runs here instead of inside the request or turn that queued it."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.db import close_old_connections

from core import tracing

logger = logging.getLogger(__name__)


class BackgroundLine:
    """`submit(fn, *args)` runs `fn` on one of `threads` threads (started on first use); a failure is logged, since
    a background thread has no caller to tell, and the thread's database connections are closed after each call.
    `wait()` lets tests and benchmarks wait for what is queued (work queued meanwhile included)."""

    def __init__(self, name: str, threads: int = 1) -> None:
        self.name = name
        self.threads = threads
        self.lock = threading.Lock()
        self.executor: ThreadPoolExecutor | None = None
        self.pending: set[Future] = set()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        with self.lock:
            if self.executor is None:
                self.executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix=self.name)
            # The work continues the trace of whoever queued it (a thread does not inherit its context).
            future = self.executor.submit(self._run, tracing.carrier(), fn, *args)
            self.pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future) -> None:
        with self.lock:
            self.pending.discard(future)

    def _run(self, trace: dict[str, str], fn: Callable[..., Any], *args: Any) -> None:

        try:
            with tracing.resumed(trace):
                fn(*args)
        except Exception:
            logger.exception("%s: background work failed", self.name)
        finally:
            close_old_connections()

    def wait(self, timeout: float = 30.0) -> bool:
        """Wait until nothing is queued or running here; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                pending = list(self.pending)
            if not pending:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            concurrent.futures.wait(pending, timeout=left)
