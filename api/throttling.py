"""The API's per-request limit, kept in the cache (Redis when REDIS_URL is set, so every process counts together;
in-process otherwise): one rate per API key (API_KEY_RATE, e.g. "600/min": at most that many requests in any minute),
for every request of the REST API (a DRF throttle), the OpenAI-compatible endpoint and /mcp alike, each request
counted in one atomic step (core.rates). What limits a turn (streams, budgets, messages) is the engine's admission
(engine.admission)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django.utils.translation import gettext as _
from rest_framework.throttling import SimpleRateThrottle

from api.keys import KeyAccess, KeyRefused, authenticate_key, bearer_secret
from core import rates


class ApiKeyRateThrottle(SimpleRateThrottle):
    """Requests per key; session requests (the pages' own use) are not counted here."""

    scope = "api_key"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        access = getattr(request, "auth", None)
        if not isinstance(access, KeyAccess):
            return None
        # By the key's random prefix, not its id: an id is handed out again (a database restored or recreated, as
        # tests do) while the counts stay in Redis, and a new key must not inherit an old one's requests.
        return self.cache_format % {"scope": self.scope, "ident": access.key.prefix}

    def allow_request(self, request: Any, view: Any) -> bool:
        """DRF's sliding window, counted in one step (core.rates) instead of reading and writing the key's list."""
        self._wait: float | None = None
        key = self.get_cache_key(request, view) if self.rate is not None else None
        if key is None:
            return True
        self._wait = rates.sliding_window(key, self.num_requests, self.duration)
        return self._wait is None

    def wait(self) -> float | None:
        return self._wait


def throttle_wait(access: KeyAccess) -> float | None:
    """None when the key may make another request now, else the seconds to wait (the answer's Retry-After)."""
    throttle = ApiKeyRateThrottle()
    if throttle.allow_request(SimpleNamespace(auth=access), None):
        return None
    return max(throttle.wait() or 1.0, 1.0)


def authorize(authorization: str | None, *scopes: str) -> KeyAccess:
    """The access of a request's `Authorization: Bearer` key, checked for one of `scopes` and against the key's
    rate; KeyRefused otherwise (429 with `retry_after` over the rate). For the views outside DRF."""
    access = authenticate_key(bearer_secret(authorization))
    access.require(*scopes)
    wait = throttle_wait(access)
    if wait is not None:
        raise KeyRefused(
            "rate_limit_exceeded",
            _("Too many requests with this API key. Retry in %(seconds)s s.") % {"seconds": max(1, round(wait))},
            status=429,
            retry_after=wait,
        )
    return access
