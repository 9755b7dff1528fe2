"""A base for the project's middleware that works in both of Django's modes: a sync chain (WSGI, tests) and an async
one (Daphne), where one sync-only middleware would push every view, async ones included, onto a worker thread."""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest


class DualModeMiddleware:
    """Subclasses implement `handle(request)` (sync) and `ahandle(request)` (async); this picks the one that fits
    the chain it was built into."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.ahandle(request)
        return self.handle(request)

    def handle(self, request: HttpRequest) -> Any:
        raise NotImplementedError

    async def ahandle(self, request: HttpRequest) -> Any:
        raise NotImplementedError
