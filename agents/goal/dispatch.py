"""Where a goal run's work runs: Celery tasks with a broker; background threads of this process in eager mode.

With a broker, each task runs GOAL_ITERATIONS_PER_TASK iterations and queues the next (`run_goal.delay`), and a
question's timeout is a task with a countdown. In eager mode (the embedded default: one process, no broker) a task
would run inside the web request that queued it, so runs go to a small line of background threads instead (as
knowledge ingestion and memory extraction do) and a question's timeout is a timer thread. A restart of the process
loses both: a run then stays as it was until it is stopped (its page says so).
"""

from __future__ import annotations

import logging
import threading

from celery import current_app

from core.background import BackgroundLine

logger = logging.getLogger(__name__)

LINE_THREADS = 2


def eager() -> bool:
    return bool(current_app.conf.task_always_eager)


# Eager mode: goal runs iterate side by side on LINE_THREADS threads; a run goes to the back of the line after each
# task's iterations, so one long run never holds back another.
goal_line = BackgroundLine("goal-run", threads=LINE_THREADS)

# Eager mode: run id -> the timer of its open question (cancelled when the user answers).
_timers: dict[int, threading.Timer] = {}
_timers_lock = threading.Lock()


def queue_run(*, tenant_id: int, run_id: int) -> str:
    """Queue one task's iterations of a run; returns where: "celery" or "thread"."""
    from agents.goal.tasks import run_goal

    if eager():
        goal_line.submit(run_goal, tenant_id, run_id)
        return "thread"
    run_goal.delay(tenant_id, run_id)
    return "celery"


def schedule_ask_timeout(*, tenant_id: int, run_id: int, asked_at: str, seconds: float) -> str:
    """After `seconds`, answer the run's open question (asked at `asked_at`) with "not replied", unless the user
    answered first; returns where the wait runs: "celery" or "thread"."""
    if not eager():
        from agents.goal.tasks import goal_ask_timeout

        goal_ask_timeout.apply_async(args=[tenant_id, run_id, asked_at], countdown=max(seconds, 0.0))
        return "celery"
    timer = threading.Timer(max(seconds, 0.0), _fire, args=(tenant_id, run_id, asked_at))
    timer.daemon = True
    with _timers_lock:
        previous = _timers.pop(run_id, None)
        _timers[run_id] = timer
    if previous is not None:
        previous.cancel()
    timer.start()
    return "thread"


def cancel_ask_timeout(*, run_id: int) -> bool:
    """Forget the timer of a question the user answered (eager mode); True if there was one."""
    with _timers_lock:
        timer = _timers.pop(run_id, None)
    if timer is None:
        return False
    timer.cancel()
    return True


def _fire(tenant_id: int, run_id: int, asked_at: str) -> None:
    from django.db import connections

    from agents.goal.tasks import goal_ask_timeout

    with _timers_lock:
        if _timers.get(run_id) is threading.current_thread():
            del _timers[run_id]
    try:
        goal_ask_timeout(tenant_id, run_id, asked_at)
    except Exception:  # a timer thread has no caller to tell: log it
        logger.exception("the question timeout of goal run %s failed", run_id)
    finally:
        connections.close_all()  # this thread's connections: the thread ends here
