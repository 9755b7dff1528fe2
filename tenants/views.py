from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from tenants.middleware import SESSION_KEY
from tenants.navigation import cards_for
from tenants.selectors import switchable_tenants


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """What the user can do in the active tenant."""
    return render(request, "tenants/home.html", {"cards": cards_for(request)})


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    """Make another of the user's tenants the active one (kept in the session)."""
    next_url = request.POST.get("next") or reverse("home")
    if not url_has_allowed_host_and_scheme(next_url, allowed_hosts={request.get_host()}):
        next_url = reverse("home")
    try:
        tenant_id = int(request.POST.get("tenant", ""))
    except ValueError:
        tenant_id = None
    tenant = next((t for t in switchable_tenants(user=request.user) if t.pk == tenant_id), None)
    if tenant is None:
        messages.error(request, _("You are not a member of that tenant."))
        return HttpResponseRedirect(next_url)
    request.session[SESSION_KEY] = tenant.pk
    messages.success(request, _("Now working in %(tenant)s.") % {"tenant": tenant.name})
    return HttpResponseRedirect(next_url)
