"""Any /api/v1/ URL the REST API does not have: its JSON error (`{"error": {"code": "not_found", "message"}}`, in the
request's language), for every method, never Django's HTML 404 page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt


def _with_slash(request: HttpRequest) -> str | None:
    """The path with the slash it lacks, when that is one of the API's URLs (Django's APPEND_SLASH would have
    redirected there, had this catch-all not answered first)."""
    if not settings.APPEND_SLASH or request.path_info.endswith("/"):
        return None
    try:
        match = resolve(f"{request.path_info}/")
    except Resolver404:
        return None
    return None if match.func is unknown_url else f"{request.path}/"


@csrf_exempt  # a 404 either way: a POST without a CSRF token must not get the HTML 403 page instead
def unknown_url(request: HttpRequest) -> HttpResponse:
    slashed = _with_slash(request)
    if slashed is not None and request.method in ("GET", "HEAD"):
        query = request.META.get("QUERY_STRING")
        return HttpResponsePermanentRedirect(f"{slashed}?{query}" if query else slashed)
    if slashed is not None:
        message = _("No such URL: %(method)s %(path)s. The API's URLs end with a slash: %(slashed)s") % {
            "method": request.method, "path": request.path, "slashed": slashed,
        }  # fmt: skip
    else:
        message = _(
            "No such URL: %(method)s %(path)s. The API's URLs are in its schema, /api/v1/schema/ (to read: "
            "/api/v1/docs/)."
        ) % {"method": request.method, "path": request.path}
    return JsonResponse({"error": {"code": "not_found", "message": message}}, status=404,
                        json_dumps_params={"ensure_ascii": False})  # fmt: skip
