"""`/healthz` reports each service as ok or failing."""

import pytest
from django.db import connection
from django.test import override_settings

pytestmark = pytest.mark.django_db

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"


def test_healthz_all_ok_against_the_real_services(client, redis_url):
    with override_settings(CELERY_TASK_ALWAYS_EAGER=False, CELERY_BROKER_URL=redis_url):
        response = client.get("/healthz")
    data = response.json()
    assert response.status_code == 200, data
    assert data["status"] == "ok"
    assert data["checks"]["database"] == {**data["checks"]["database"], "ok": True, "vendor": connection.vendor}
    assert data["checks"]["channel_layer"]["ok"] is True
    assert data["checks"]["channel_layer"]["backend"] == "RedisChannelLayer"
    assert data["checks"]["broker"]["ok"] is True


def test_healthz_reports_a_stopped_redis_as_failing(client):
    layers = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [UNREACHABLE_REDIS]}}}
    with override_settings(CHANNEL_LAYERS=layers, CELERY_TASK_ALWAYS_EAGER=False, CELERY_BROKER_URL=UNREACHABLE_REDIS):
        response = client.get("/healthz")
    data = response.json()
    assert response.status_code == 503
    assert data["status"] == "failing"
    assert data["checks"]["database"]["ok"] is True
    assert data["checks"]["channel_layer"]["ok"] is False
    assert data["checks"]["broker"]["ok"] is False
    assert "error" in data["checks"]["broker"]
    # A probe must answer quickly even when a service is down.
    assert data["checks"]["broker"]["ms"] < 10_000


def test_the_favicon_is_served(client):
    """The admin asked for /favicon.ico and got a 404 (a newcomer's finding)."""
    response = client.get("/favicon.ico", follow=True)
    assert response.status_code == 200 and response.redirect_chain
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"<svg" in body
