"""The OpenAI-compatible endpoint's own chain under Daphne (config.api_handler): none of the pages' middleware runs
for a /v1 request (each one a thread hop), its answers still follow the request's language, and every other path
keeps the whole chain."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.exceptions import ImproperlyConfigured
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.locale import LocaleMiddleware

from api.models import KeyScope
from config.api_handler import ApiHandler

pytestmark = pytest.mark.django_db(transaction=True)

PAGE_MIDDLEWARE = (SessionMiddleware, CsrfViewMiddleware, MessageMiddleware, LocaleMiddleware, AuthenticationMiddleware)


@pytest.fixture
def page_hooks(monkeypatch) -> list[tuple[str, str]]:
    """(middleware, path) of every page middleware's request hook that runs."""
    ran: list[tuple[str, str]] = []
    for middleware in PAGE_MIDDLEWARE:

        def record(self, request, _original=middleware.process_request, _name=middleware.__name__):
            ran.append((_name, request.path))
            return _original(self, request)

        monkeypatch.setattr(middleware, "process_request", record)
    return ran


def _get(server, path: str, secret: str = "", language: str = "en") -> httpx.Response:
    headers = {"Accept-Language": language}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    return httpx.get(f"{server.url}{path}", headers=headers, timeout=20, trust_env=False)


def test_a_v1_request_runs_none_of_the_pages_middleware_and_a_page_runs_all(
    asgi_live_server, page_hooks, tenant_admin, make_key
):
    _key, secret = make_key(tenant_admin, scopes=[KeyScope.READ])

    listed = _get(asgi_live_server, "/v1/models", secret)
    refused = _get(asgi_live_server, "/v1/models", "ak-wrong.secret")
    assert (listed.status_code, refused.status_code) == (200, 401)
    assert "set-cookie" not in listed.headers and listed.json()["object"] == "list"
    assert page_hooks == []

    page = _get(asgi_live_server, "/accounts/login/")
    assert page.status_code == 200
    assert {name for name, _path in page_hooks} == {middleware.__name__ for middleware in PAGE_MIDDLEWARE}


@pytest.mark.parametrize(
    ("language", "message", "content_language"),
    [("zh-CN,zh;q=0.9", "此 API 密钥无效。", "zh-hans"), ("en-US,en;q=0.8", "This API key is not valid.", "en")],
)
def test_a_v1_answer_follows_the_requests_language(asgi_live_server, language, message, content_language):
    refused = _get(asgi_live_server, "/v1/models", "ak-wrong.secret", language=language)
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == message
    assert refused.headers["content-language"] == content_language
    assert "Accept-Language" in refused.headers["vary"]


def test_the_chain_takes_async_capable_middleware_only(settings):
    settings.API_MIDDLEWARE = ["whitenoise.middleware.WhiteNoiseMiddleware"]  # sync only
    with pytest.raises(ImproperlyConfigured, match="WhiteNoiseMiddleware is not async-capable"):
        ApiHandler()
