"""View helpers the tenant pages share: who may change things, and decorators that say so once."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from tenants import access

View = Callable[..., HttpResponse]


def may_administer(request: HttpRequest) -> bool:
    """Owners and admins of the active tenant (and platform superusers) change its configuration; members read.
    (tenants.access.may_administer, for a request.)"""
    return access.may_administer(user=request.user, membership=getattr(request, "membership", None))


def tenant_required(view: View) -> View:
    """Logged in and working in a tenant; without one there is nothing of a tenant to show (404)."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if getattr(request, "tenant", None) is None:
            raise Http404(_("You are not working in any tenant."))
        return view(request, *args, **kwargs)

    return wrapped


def administrators_only(forbidden_template: str) -> Callable[[View], View]:
    """`tenant_required`, and a 403 page (`forbidden_template`, which explains) for members who try to change."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not may_administer(request):
                return render(request, forbidden_template, status=403)
            return view(request, *args, **kwargs)

        return tenant_required(wrapped)

    return decorate
