"""The OpenAI-compatible endpoint's own Django handler: `/v1/...` runs through API_MIDDLEWARE instead of MIDDLEWARE.

Its requests carry a key and use no session, no CSRF token (a key is not a cookie), no flash messages and no login
lock-out, and their views enter the key's tenant scope themselves. Each of those page middlewares is one hop to a
worker thread per request under Daphne (Django's MiddlewareMixin runs its hooks on one), measured as a share of an
API turn's CPU (docs/operations.md). What an API request does need stays: the client's address from trusted proxies
(rate limits, logs) and its language (errors in Chinese or English, from Accept-Language), both on the event loop.
`/mcp` never reaches Django (api.mcp_server). The REST API (/api) keeps the whole chain: the pages call it with
their session, and its missing-slash redirects are CommonMiddleware's.

Every middleware of API_MIDDLEWARE must be async-capable: the chain is built for the event loop only.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.exception import convert_exception_to_response
from django.http import HttpRequest, HttpResponse
from django.utils import translation
from django.utils.cache import patch_vary_headers
from django.utils.module_loading import import_string

from core.middleware import DualModeMiddleware

API_PREFIX = "/v1/"


class ApiHandler(ASGIHandler):
    """Django's ASGI handler with API_MIDDLEWARE as its chain."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        handler = convert_exception_to_response(self._get_response_async)
        for path in reversed(settings.API_MIDDLEWARE):
            middleware = import_string(path)
            if not getattr(middleware, "async_capable", False):
                raise ImproperlyConfigured(f"API_MIDDLEWARE: {path} is not async-capable.")
            handler = convert_exception_to_response(middleware(handler))
        self._middleware_chain = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # Django's handler runs each request in a ThreadSensitiveContext of its own: its first thread-sensitive hop
        # (the request_started signal's, then the response's close) starts a new worker thread for the request and
        # the context's exit stops it. The API's views and middlewares are async and their database work goes
        # through core.db's hops, so those two hops run on asgiref's one shared thread instead.
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)


class LanguageMiddleware(DualModeMiddleware):
    """LocaleMiddleware's part an API needs, without a thread hop: the language of the request's cookie or
    Accept-Language for its answer (no session, no language prefix in API paths)."""

    def _activate(self, request: HttpRequest) -> str:
        language = translation.get_language_from_request(request)
        translation.activate(language)
        request.LANGUAGE_CODE = translation.get_language()
        return request.LANGUAGE_CODE

    def _finish(self, response: HttpResponse, language: str) -> HttpResponse:
        patch_vary_headers(response, ("Accept-Language",))
        response.headers.setdefault("Content-Language", language)
        return response

    def handle(self, request: HttpRequest) -> Any:
        return self._finish(self.get_response(request), self._activate(request))

    async def ahandle(self, request: HttpRequest) -> Any:
        language = self._activate(request)
        return self._finish(await self.get_response(request), language)


def route_api(django_app: Any) -> Any:
    """The HTTP application: /v1 requests to ApiHandler, every other one to `django_app`."""
    api_app = ApiHandler()

    async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("path", "").startswith(API_PREFIX):
            await api_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return http
