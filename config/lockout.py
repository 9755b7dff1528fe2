"""The page a locked-out login gets (django-axes calls this instead of its own answer): why, and for how long."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def locked_out(request: HttpRequest, response: HttpResponse | None, credentials: Any = None, *args: Any,
               **kwargs: Any) -> HttpResponse:  # fmt: skip
    minutes = max(1, round(settings.AXES_COOLOFF_TIME.total_seconds() / 60))
    context = {"failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": minutes}
    return render(request, "registration/locked_out.html", context, status=429)
