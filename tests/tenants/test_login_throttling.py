"""Login throttling (the probe's finding: 200 wrong passwords in a row were accepted, then the right one logged in):
after LOGIN_FAILURE_LIMIT wrong passwords from one address, or for one username, that address and that username are
refused for a while, with an explanation, on the login page and the admin's; other users at other addresses are not
affected. The address is the peer's; X-Forwarded-For is believed only from TRUSTED_PROXIES (M1: Daphne believed any
client's, so a new one per try escaped the count and a victim's address could be locked out)."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counts():
    cache.clear()
    yield
    cache.clear()


def _login(client, username, password, url=None, address="198.51.100.7", language="en", **headers):
    return client.post(url or reverse("login"), {"username": username, "password": password},
                       REMOTE_ADDR=address, HTTP_ACCEPT_LANGUAGE=language, **headers)  # fmt: skip


def test_five_wrong_passwords_lock_that_username_and_that_address(client, settings):
    UserFactory(username="chef", password="right-password")
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, "chef", "wrong").status_code == 200
    locked = _login(client, "chef", "wrong")
    assert locked.status_code == 429
    assert "wrong 5 times in a row" in locked.content.decode() and "15 minutes" in locked.content.decode()
    right = _login(client, "chef", "right-password")
    assert right.status_code == 429 and "_auth_user_id" not in client.session  # even the right one waits
    assert _login(client, "chef", "right-password", address="203.0.113.9").status_code == 429  # the username waits
    UserFactory(username="sous-chef", password="right-password")
    assert _login(client, "sous-chef", "right-password").status_code == 429  # and so does the address
    assert _login(client, "sous-chef", "right-password", address="203.0.113.9").status_code == 302  # nobody else


def test_m1_a_new_forwarded_address_per_try_still_locks_the_username(client, settings):
    UserFactory(username="chef", password="right-password")
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        response = _login(client, "chef", "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{attempt + 1}")
    assert response.status_code == 429
    assert _login(client, "chef", "right-password", HTTP_X_FORWARDED_FOR="192.0.2.200").status_code == 429
    # Many real addresses (a botnet) do not escape it either: the username is counted by itself.
    cache.clear()
    for attempt in range(settings.AXES_FAILURE_LIMIT):
        response = _login(client, "chef", "wrong", address=f"203.0.113.{attempt + 1}")
    assert response.status_code == 429
    assert _login(client, "chef", "right-password", address="203.0.113.100").status_code == 429
    assert "_auth_user_id" not in client.session


def test_m1_a_forged_victim_address_does_not_lock_the_victim_out(client, settings):
    UserFactory(username="victim", password="right-password")
    for _attempt in range(settings.AXES_FAILURE_LIMIT + 1):
        response = _login(client, "someone", "wrong", address="203.0.113.66", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert response.status_code == 429  # the attacker's own address is locked ...
    assert _login(client, "victim", "right-password", address="198.51.100.7").status_code == 302  # not the victim's


def test_m1_a_trusted_proxy_has_its_forwarded_address_honoured(client, settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    UserFactory(username="chef", password="right-password")
    UserFactory(username="waiter", password="right-password")

    def via_proxy(username, password, forwarded, proxy="10.0.0.2"):
        return _login(client, username, password, address=proxy, HTTP_X_FORWARDED_FOR=forwarded)

    # The proxy appends the address it saw; what the client wrote on the left is not believed.
    for _attempt in range(settings.AXES_FAILURE_LIMIT):
        response = via_proxy("someone", "wrong", "192.0.2.9, 198.51.100.7")
    assert response.status_code == 429
    assert via_proxy("chef", "right-password", "198.51.100.7", proxy="10.0.0.3").status_code == 429  # that client
    assert via_proxy("chef", "right-password", "198.51.100.7, 203.0.113.9").status_code == 302  # another client
    client.logout()
    # A client that claims the locked address on the left of its header is counted at its own address.
    assert via_proxy("waiter", "right-password", "198.51.100.7, 203.0.113.10").status_code == 302


def test_the_lockout_is_explained_in_chinese(client, settings):
    UserFactory(username="waiter", password="right-password")
    for _attempt in range(settings.AXES_FAILURE_LIMIT):
        response = _login(client, "waiter", "wrong", language="zh-hans")
    assert response.status_code == 429 and "连续输错" in response.content.decode()


def test_a_success_resets_the_count(client, settings):
    UserFactory(username="owner", password="right-password")
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        _login(client, "owner", "wrong")
    assert _login(client, "owner", "right-password").status_code == 302
    client.logout()
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, "owner", "wrong").status_code == 200


def test_the_admin_login_is_throttled_too(client, settings):
    UserFactory(username="root", password="right-password", is_staff=True, is_superuser=True)
    url = reverse("admin:login")
    for _attempt in range(settings.AXES_FAILURE_LIMIT):
        response = _login(client, "root", "wrong", url=url)
    assert response.status_code == 429
    assert _login(client, "root", "right-password", url=url).status_code == 429
