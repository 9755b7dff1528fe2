"""Forwarded headers are believed only from TRUSTED_PROXIES (M1), and DJANGO_BEHIND_TLS turns on HTTPS redirects,
HSTS and secure cookies (L1), with X-Forwarded-Proto read only from a trusted proxy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse

from config.proxy import client_address, proxy_networks

ROOT = Path(__file__).resolve().parents[2]
PROXIES = proxy_networks(["10.0.0.0/8", "fd00::1"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "client"),
    [
        ("203.0.113.5", "198.51.100.7", "203.0.113.5"),  # no proxy trusted: the peer, whatever the header says
        ("10.0.0.2", "198.51.100.7", "198.51.100.7"),
        ("10.0.0.2", "192.0.2.1, 198.51.100.7", "198.51.100.7"),  # the left is the client's own words
        ("10.0.0.2", "198.51.100.7, 10.0.0.9", "198.51.100.7"),  # two trusted proxies in a row
        ("fd00::1", "2001:db8::7", "2001:db8::7"),
        ("10.0.0.2", "unknown", "10.0.0.2"),
        ("10.0.0.2", "", "10.0.0.2"),
    ],
)
def test_m1_the_client_address_is_read_from_the_right_past_trusted_proxies(peer, forwarded, client):
    assert client_address(peer, forwarded, PROXIES) == client


def test_m1_a_trusted_proxy_that_is_not_an_address_is_refused_at_start():
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES"):
        proxy_networks(["proxy.internal"])


@pytest.fixture
def behind_tls(settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]


def test_l1_https_is_believed_from_a_trusted_proxy_only(client, behind_tls, db):
    login = reverse("login")
    assert client.get(login, REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_PROTO="https").status_code == 200
    forged = client.get(login, REMOTE_ADDR="203.0.113.5", HTTP_X_FORWARDED_PROTO="https")
    assert forged.status_code == 301 and forged["Location"].startswith("https://")
    assert client.get(reverse("healthz"), REMOTE_ADDR="203.0.113.5").status_code != 301  # load balancers' checks


def _python(*arguments: str, **env_overrides: str) -> subprocess.CompletedProcess:
    """Python run with production settings from these variables (none of the test run's; no collected static files)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "TRUSTED_", "REDIS_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_SECRET_KEY": "k3y-" * 20,
                "DJANGO_ALLOWED_HOSTS": "agents.example.com", "DJANGO_STATIC_MANIFEST": "0",
                **env_overrides})  # fmt: skip
    return subprocess.run([sys.executable, *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_l1_check_deploy_has_no_hsts_or_redirect_warning_behind_tls():
    plain = _python("manage.py", "check", "--deploy")
    assert "security.W004" in plain.stderr + plain.stdout and "security.W008" in plain.stderr + plain.stdout
    tls = _python("manage.py", "check", "--deploy", DJANGO_BEHIND_TLS="1")
    output = tls.stderr + tls.stdout
    assert "security.W004" not in output and "security.W008" not in output, output


SHOW = (
    "import json, config.settings as s; print(json.dumps({name: getattr(s, name, None) for name in ("
    "'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
    "'SECURE_PROXY_SSL_HEADER', 'TRUSTED_PROXIES', 'MIDDLEWARE')}))"
)


def test_l1_behind_tls_settings_and_the_proxy_header_only_with_trusted_proxies():
    result = _python("-c", SHOW, DJANGO_BEHIND_TLS="1")
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["SECURE_SSL_REDIRECT"] is True and values["SECURE_HSTS_SECONDS"] >= 31_536_000
    assert values["SESSION_COOKIE_SECURE"] is True and values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_PROXY_SSL_HEADER"] is None and values["TRUSTED_PROXIES"] == []
    assert values["MIDDLEWARE"][0] == "config.proxy.ForwardedHeadersMiddleware"
    proxied = json.loads(_python("-c", SHOW, DJANGO_BEHIND_TLS="1", TRUSTED_PROXIES="10.0.0.5,10.1.0.0/16").stdout)
    assert proxied["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert proxied["TRUSTED_PROXIES"] == ["10.0.0.5/32", "10.1.0.0/16"]
    off = json.loads(_python("-c", SHOW).stdout)
    assert off["SECURE_SSL_REDIRECT"] is None and off["SECURE_HSTS_SECONDS"] is None
