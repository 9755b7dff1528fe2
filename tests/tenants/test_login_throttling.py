"""Login throttling (the probe's finding: 200 wrong passwords in a row were accepted, then the right one logged in):
after LOGIN_FAILURE_LIMIT wrong passwords for one username from one address, that pair is refused for a while, with
an explanation, on the login page and the admin's; other users and addresses are not affected."""

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


def _login(client, username, password, url=None, address="198.51.100.7", language="en"):
    return client.post(url or reverse("login"), {"username": username, "password": password},
                       REMOTE_ADDR=address, HTTP_ACCEPT_LANGUAGE=language)  # fmt: skip


def test_five_wrong_passwords_lock_that_username_from_that_address(client, settings):
    UserFactory(username="chef", password="right-password")
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _login(client, "chef", "wrong").status_code == 200
    locked = _login(client, "chef", "wrong")
    assert locked.status_code == 429
    assert "wrong 5 times in a row" in locked.content.decode() and "15 minutes" in locked.content.decode()
    right = _login(client, "chef", "right-password")
    assert right.status_code == 429 and "_auth_user_id" not in client.session  # even the right one waits
    assert _login(client, "chef", "right-password", address="203.0.113.9").status_code == 302  # not another address


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
