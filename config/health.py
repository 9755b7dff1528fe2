"""`/healthz`: whether the database, the channel layer and the Celery broker answer, as JSON."""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from kombu import Connection

CHECK_TIMEOUT = 2.0  # seconds per check: a health probe must answer quickly even when a service hangs


def _timed(check) -> dict:
    started = time.perf_counter()
    try:
        detail = check()
        result = {"ok": True, **detail}
    except Exception as exc:  # a health check reports every failure, whatever its type
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def check_database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"vendor": connection.vendor}


def check_channel_layer() -> dict:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("CHANNEL_LAYERS is not configured")

    async def round_trip() -> None:
        channel = await layer.new_channel("healthz.")
        await layer.send(channel, {"type": "healthz.ping"})
        message = await asyncio.wait_for(layer.receive(channel), CHECK_TIMEOUT)
        if message.get("type") != "healthz.ping":
            raise RuntimeError("channel layer returned another message")

    async def bounded() -> None:
        await asyncio.wait_for(round_trip(), CHECK_TIMEOUT)

    async_to_sync(bounded)()
    return {"backend": type(layer).__name__}


def check_broker() -> dict:
    url = settings.CELERY_BROKER_URL
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return {"transport": "eager (tasks run in-process)"}
    with Connection(url, connect_timeout=CHECK_TIMEOUT, transport_options={"socket_timeout": CHECK_TIMEOUT}) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=CHECK_TIMEOUT)
        transport = conn.transport_cls
    return {"transport": str(transport)}


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {
        "database": _timed(check_database),
        "channel_layer": _timed(check_channel_layer),
        "broker": _timed(check_broker),
    }
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse({"status": "ok" if healthy else "failing", "checks": checks}, status=200 if healthy else 503)
