"""ReDoc's bundle as the API reference page loads it: drf-spectacular-sidecar's copy, with the "API docs by Redocly"
logo that the bundle fetches from cdn.redoc.ly replaced by an empty inline image (the Content-Security-Policy
refuses the CDN, and nothing the pages load leaves the site)."""

from __future__ import annotations

import functools

from django.contrib.staticfiles import finders
from django.http import HttpRequest, HttpResponse

BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
EMPTY_IMAGE = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"


@functools.cache
def _bundle() -> bytes:
    path = finders.find(BUNDLE)
    if not path:
        raise FileNotFoundError(f"{BUNDLE} is missing: install drf-spectacular-sidecar (requirements.txt).")
    with open(path, "rb") as file:
        return file.read().replace(CDN_LOGO, EMPTY_IMAGE)


def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """The patched bundle; browsers keep it a day."""
    response = HttpResponse(_bundle(), content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = "public, max-age=86400"
    return response
