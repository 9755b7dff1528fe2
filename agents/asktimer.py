"""The timeout of a question put to the user (a goal run's ask_user, a plan's interrupted step): one scheduler.

With a broker (CELERY_TASK_ALWAYS_EAGER off) the timeout is the Celery task with a countdown, run by a worker. In
eager mode (the embedded default: one process, no broker) a countdown task would run at once, so it runs on a daemon
timer thread of this process instead; a restart of the process loses the timer. The task is named, not imported, as
a broker names it: the task modules run the code that schedules their timeouts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Sequence
from typing import Any

from celery import current_app
from django.db import connections

logger = logging.getLogger(__name__)


class AskTimer:
    """The pending timeouts of one kind of question, keyed by what asked (a run id, a plan id): a new timeout of a
    key replaces its previous one, `cancel(key)` forgets it when the user answers. `key in timer` says whether an
    in-process timer is pending."""

    def __init__(self, *, task_name: str, label: str) -> None:
        self.task_name = task_name
        self.label = label
        self._timers: dict[Hashable, threading.Timer] = {}
        self._lock = threading.Lock()

    def schedule(self, key: Hashable, *, args: Sequence[Any], seconds: float, in_process: bool = True) -> str:
        """Run the task with `args` after `seconds`; returns where it waits: "celery", "process" (a timer thread of
        this process, eager mode) or "off" (eager mode with `in_process` False: nothing waits)."""
        countdown = max(seconds, 0.0)
        if not current_app.conf.task_always_eager:
            current_app.tasks[self.task_name].apply_async(args=list(args), countdown=countdown)
            return "celery"
        if not in_process:
            return "off"
        timer = threading.Timer(countdown, self._fire, args=(key, tuple(args)))
        timer.daemon = True
        with self._lock:
            previous = self._timers.pop(key, None)
            self._timers[key] = timer
        if previous is not None:
            previous.cancel()
        timer.start()
        return "process"

    def cancel(self, key: Hashable) -> bool:
        """Forget the in-process timer of a question the user answered; True if there was one."""
        with self._lock:
            timer = self._timers.pop(key, None)
        if timer is None:
            return False
        timer.cancel()
        return True

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._timers

    def _fire(self, key: Hashable, args: tuple[Any, ...]) -> None:
        with self._lock:
            if self._timers.get(key) is threading.current_thread():
                del self._timers[key]
        try:
            current_app.tasks[self.task_name](*args)
        except Exception:  # a timer thread has no caller to tell: log it
            logger.exception("The ask timeout of %s %s failed", self.label, key)
        finally:
            connections.close_all()  # this thread's connections: the thread ends here
