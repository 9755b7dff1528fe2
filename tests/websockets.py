"""Helpers for websocket tests: a real session cookie, as a browser would send it."""

from django.conf import settings
from django.test import Client


def session_cookie(user, tenant=None) -> bytes:
    """The session cookie header value of `user` logged in, with `tenant` as the active tenant."""
    client = Client()
    client.force_login(user)
    if tenant is not None:
        session = client.session
        session["active_tenant_id"] = tenant.pk
        session.save()
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()
