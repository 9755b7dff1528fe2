"""Lifting a login lockout early, with the commands docs/security.md names (issue 34 asked whether `manage.py
axes_reset` works here). With this project's settings the counts live in the database (the embedded default) or in
Redis (AxesCacheHandler), and `axes_reset` (everything) works with the database only: the cache handler refuses
("Cannot clear all entries from cache"). `axes_reset_username <name>` and `axes_reset_ip <address>` work with both,
so those are the documented ones; each is run here with both handlers on a locked login."""

from __future__ import annotations

import pytest
from axes.handlers.proxy import AxesProxyHandler
from django.core.cache import cache
from django.core.management import call_command
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

# The two handlers config/settings.py chooses between (by REDIS_URL); the tests' cache stands in for Redis.
HANDLERS = {"database": "axes.handlers.database.AxesDatabaseHandler", "cache": "axes.handlers.cache.AxesCacheHandler"}
ATTACKER, VICTIM = "203.0.113.66", "198.51.100.7"


@pytest.fixture(params=list(HANDLERS))
def handler(request, settings):
    """Count with one handler for the test (axes keeps its handler object: it is made again, then put back)."""
    original = settings.AXES_HANDLER
    settings.AXES_HANDLER = HANDLERS[request.param]
    AxesProxyHandler.get_implementation(force=True)
    cache.clear()
    yield request.param
    cache.clear()
    settings.AXES_HANDLER = original
    AxesProxyHandler.get_implementation(force=True)


def _login(client, username: str, password: str, address: str) -> int:
    response = client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)
    return response.status_code


def _lock(client, settings, username: str = "chef") -> None:
    for _attempt in range(settings.AXES_FAILURE_LIMIT):
        _login(client, username, "wrong", ATTACKER)
    assert _login(client, username, "right-password", VICTIM) == 429  # the username is locked everywhere


def test_axes_reset_username_unlocks_a_locked_username(handler, client, settings):
    UserFactory(username="chef", password="right-password")
    _lock(client, settings)
    call_command("axes_reset_username", "chef")
    assert _login(client, "chef", "right-password", VICTIM) == 302


def test_axes_reset_ip_unlocks_a_locked_address(handler, client, settings):
    UserFactory(username="chef", password="right-password")
    UserFactory(username="waiter", password="right-password")
    _lock(client, settings)
    assert _login(client, "waiter", "right-password", ATTACKER) == 429  # the address is locked too
    call_command("axes_reset_ip", ATTACKER)
    assert _login(client, "waiter", "right-password", ATTACKER) == 302


def test_axes_reset_of_everything_works_with_the_database_handler_only(handler, client, settings):
    UserFactory(username="chef", password="right-password")
    _lock(client, settings)
    if handler == "cache":
        with pytest.raises(NotImplementedError, match="Cannot clear all entries from cache"):
            call_command("axes_reset")
        assert _login(client, "chef", "right-password", VICTIM) == 429
    else:
        call_command("axes_reset")
        assert _login(client, "chef", "right-password", VICTIM) == 302
