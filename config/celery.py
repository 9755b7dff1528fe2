"""The Celery app. Tasks take ids (tenant_id included) and enter the tenant scope themselves.

Its signal hookups live here, with the app, not in the floors below: a worker refuses to start while a required
registration is missing, and a task continues the trace of whoever queued it (docs/observability.md): the sender
puts the current span on the message as W3C headers (core.tracing.carrier), the worker resumes it around the task
(core.tracing.resumed). core stays free of Celery.
"""

import os
from contextlib import ExitStack
from typing import Any

import django
from celery import Celery, signals

from core import tracing
from core.registry import require_slots

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agent_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# task id -> the trace context a running task resumed, left when it ends.
_task_traces: dict[str, ExitStack] = {}


def carry_trace(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """before_task_publish: the current span goes on the message (nothing when traces are off)."""
    if headers is not None:
        headers.update(tracing.carrier())


def resume_trace(task_id: str = "", task: Any = None, **_: Any) -> None:
    """task_prerun: the task's spans are children of the span that queued it."""
    if task is None or not tracing.enabled():
        return
    headers = {key: getattr(task.request, key, None) for key in ("traceparent", "tracestate")}
    if headers["traceparent"]:
        stack = ExitStack()
        stack.enter_context(tracing.resumed({key: value for key, value in headers.items() if value}))
        _task_traces[task_id] = stack


def leave_trace(task_id: str = "", **_: Any) -> None:
    """task_postrun: leave the context resume_trace entered."""
    stack = _task_traces.pop(task_id, None)
    if stack is not None:
        stack.close()


signals.before_task_publish.connect(carry_trace, weak=False, dispatch_uid="config.celery.carry_trace")
signals.task_prerun.connect(resume_trace, weak=False, dispatch_uid="config.celery.resume_trace")
signals.task_postrun.connect(leave_trace, weak=False, dispatch_uid="config.celery.leave_trace")


@signals.worker_init.connect
def refuse_missing_registrations(**kwargs: Any) -> None:
    """A worker runs server-started turns: it refuses to start while a registration they read is missing."""
    django.setup()  # idempotent: Celery's own Django fixup may have run it already
    require_slots()
