"""The Celery app. Tasks take ids (tenant_id included) and enter the tenant scope themselves."""

import os
from typing import Any

import django
from celery import Celery, signals

from core import tracing
from core.registry import require_slots

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("agent_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
tracing.connect_celery()  # a task continues the trace of whoever queued it (docs/observability.md)


@signals.worker_init.connect
def refuse_missing_registrations(**kwargs: Any) -> None:
    """A worker runs server-started turns: it refuses to start while a registration they read is missing."""
    django.setup()  # idempotent: Celery's own Django fixup may have run it already
    require_slots()
