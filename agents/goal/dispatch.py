"""Where a goal run's work runs: Celery tasks with a broker; background threads of this process in eager mode.

With a broker, each task runs GOAL_ITERATIONS_PER_TASK iterations and queues the next (`run_goal.delay`), and a
question's timeout is a task with a countdown. In eager mode (the embedded default: one process, no broker) a task
would run inside the web request that queued it, so runs go to a small line of background threads instead (as
knowledge ingestion and memory extraction do) and a question's timeout is a timer thread. A restart of the process
loses both: a run then stays as it was until it is stopped (its page says so).
"""

from __future__ import annotations

from celery import current_app

from agents.asktimer import AskTimer
from core.background import BackgroundLine

LINE_THREADS = 2
# The run's Celery tasks (agents.goal.tasks), by name as a broker knows them: the tasks run the loop and the services
# that queue them, so this module, below both, does not import them.
RUN_TASK = "agents.goal.run_goal"
ASK_TIMEOUT_TASK = "agents.goal.ask_timeout"


def eager() -> bool:
    return bool(current_app.conf.task_always_eager)


# Eager mode: goal runs iterate side by side on LINE_THREADS threads; a run goes to the back of the line after each
# task's iterations, so one long run never holds back another.
goal_line = BackgroundLine("goal-run", threads=LINE_THREADS)

# A question's timeout: run id -> its pending timer in eager mode (cancelled when the user answers).
ask_timer = AskTimer(task_name=ASK_TIMEOUT_TASK, label="goal run")


def queue_run(*, tenant_id: int, run_id: int) -> str:
    """Queue one task's iterations of a run; returns where: "celery" or "thread"."""
    run_goal = current_app.tasks[RUN_TASK]
    if eager():
        goal_line.submit(run_goal, tenant_id, run_id)
        return "thread"
    run_goal.delay(tenant_id, run_id)
    return "celery"


def schedule_ask_timeout(*, tenant_id: int, run_id: int, asked_at: str, seconds: float) -> str:
    """After `seconds`, answer the run's open question (asked at `asked_at`) with "not replied", unless the user
    answered first; returns where the wait runs: "celery" or "process"."""
    return ask_timer.schedule(run_id, args=(tenant_id, run_id, asked_at), seconds=seconds)


def cancel_ask_timeout(*, run_id: int) -> bool:
    """Forget the timer of a question the user answered (eager mode); True if there was one."""
    return ask_timer.cancel(run_id)
