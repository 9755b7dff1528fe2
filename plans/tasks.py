"""The ask-user timeout (seed 3): resume an interrupted plan with a no-reply message when the user stays silent.

With a broker (CELERY_TASK_ALWAYS_EAGER off) the timeout is a Celery task with a countdown, run by a worker. In
eager mode (the embedded default: one process, no broker) a countdown task would run at once, so the timeout runs
on a timer thread of this process instead; a restart of the process loses the timer (the plan then waits for the
user's next message). Either way, a reply of the user first resumes the plan and the timeout then does nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable

from asgiref.sync import async_to_sync
from celery import current_app, shared_task

from core.conf import setting

NO_REPLY = "用户暂未回复 / the user has not replied"

logger = logging.getLogger(__name__)

# Eager mode: plan id -> its pending timer (cancelled when the plan resumes, replaced when it asks again).
_timers: dict[int, threading.Timer] = {}
_timers_lock = threading.Lock()


# The surface that runs a turn the server starts (engine.turns.run_server_turn, registered by the chat app): it
# claims the conversation like a typed message would and streams the frames. Without one, the turn runs silently.
ServerTurn = Callable[..., Awaitable[bool]]
_server_turn: ServerTurn | None = None


def register_server_turn(runner: ServerTurn) -> None:
    global _server_turn
    _server_turn = runner


@shared_task(name="plans.ask_timeout")
def plan_ask_timeout(plan_id: int, interrupted_at: str | None = None) -> bool:
    """Resume the plan with NO_REPLY if it is still interrupted (and not interrupted again since)."""
    from agents.runtime import run_turn
    from agents.sinks import NullSink
    from memory.services import message_add
    from plans.models import Plan, PlanStatus
    from tenants.scope import all_tenants, tenant_scope

    with all_tenants(reason="plan ask timeout"):
        plan = Plan.objects.select_related("conversation__tenant").filter(pk=plan_id).first()
    if plan is None or plan.status != PlanStatus.INTERRUPTED:
        return False
    if interrupted_at and plan.updated_at.isoformat() != interrupted_at:
        return False
    conversation = plan.conversation
    with tenant_scope(conversation.tenant):
        if _server_turn is not None:
            return async_to_sync(_server_turn)(conversation=conversation, content=NO_REPLY)
        message = message_add(conversation=conversation, role="user", content=NO_REPLY)
        async_to_sync(run_turn)(conversation=conversation, user_message=message, sink=NullSink())
    return True


def ask_timeout_seconds() -> float:
    return float(setting("PLAN_ASK_TIMEOUT_SECONDS"))


def ask_timeout_schedule(*, plan_id: int, interrupted_at: str) -> str:
    """Schedule the no-reply resume of an interrupted plan; returns where it waits: "celery", "process" or "off"
    (PLAN_ASK_TIMEOUT_SECONDS <= 0, or eager mode with PLAN_ASK_TIMEOUT_IN_PROCESS off)."""
    countdown = ask_timeout_seconds()
    if countdown <= 0:
        return "off"
    if not current_app.conf.task_always_eager:
        plan_ask_timeout.apply_async(args=[plan_id, interrupted_at], countdown=countdown)
        return "celery"
    if not setting("PLAN_ASK_TIMEOUT_IN_PROCESS"):
        return "off"
    timer = threading.Timer(countdown, _fire, args=(plan_id, interrupted_at))
    timer.daemon = True
    with _timers_lock:
        previous = _timers.pop(plan_id, None)
        _timers[plan_id] = timer
    if previous is not None:
        previous.cancel()
    timer.start()
    return "process"


def ask_timeout_cancel(*, plan_id: int) -> bool:
    """Forget the in-process timer of a plan that resumed (the user answered); True if there was one."""
    with _timers_lock:
        timer = _timers.pop(plan_id, None)
    if timer is None:
        return False
    timer.cancel()
    return True


def _fire(plan_id: int, interrupted_at: str) -> None:
    from django.db import connections

    with _timers_lock:
        if _timers.get(plan_id) is threading.current_thread():
            del _timers[plan_id]
    try:
        plan_ask_timeout(plan_id, interrupted_at)
    except Exception:  # a timer thread has no caller to tell: log it
        logger.exception("The ask timeout of plan %s failed", plan_id)
    finally:
        connections.close_all()  # this thread's connections: the thread ends here
