"""The tenant preamble of a Celery task, once: tasks take `tenant_id` (ARCHITECTURE.md) and enter its scope."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from tenants.models import Tenant
from tenants.scope import tenant_scope

Result = TypeVar("Result")


def tenant_task(*, gone: Any = "gone") -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Run the decorated task inside its tenant's scope: the argument named `tenant_id` picks the tenant; a task
    queued before its tenant was deleted returns `gone` without running. Put it under `@shared_task`, whose
    argument check reads the task's own signature through it."""

    def decorate(task: Callable[..., Result]) -> Callable[..., Result]:
        position = list(inspect.signature(task).parameters).index("tenant_id")

        @wraps(task)
        def scoped(*args: Any, **kwargs: Any) -> Result:
            tenant_id = kwargs["tenant_id"] if "tenant_id" in kwargs else args[position]
            tenant = Tenant.objects.filter(pk=tenant_id).first()
            if tenant is None:
                return gone
            with tenant_scope(tenant):
                return task(*args, **kwargs)

        return scoped

    return decorate
