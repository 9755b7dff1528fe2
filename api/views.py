"""The API keys page of a tenant (owners and admins): list, create (the secret is shown once), revoke."""

from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods

from api.forms import ApiKeyForm
from api.keys import key_create, key_revoke
from api.models import ApiKey
from tenants.decorators import administrators_only

administrators = administrators_only("api/forbidden.html")


@administrators
@require_http_methods(["GET", "POST"])
def key_list(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        day = form.cleaned_data["expires_at"]
        expires_at = timezone.make_aware(dt.datetime.combine(day, dt.time.min)) if day is not None else None
        try:
            key, secret = key_create(
                tenant=request.tenant,
                user=request.user,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                agents=form.cleaned_data["agents"],
                expires_at=expires_at,
            )
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            # Rendered, not redirected: the secret is in this one answer and nowhere else (no URL, no session).
            response = render(request, "api/created.html", {"key": key, "secret": secret})
            response["Cache-Control"] = "no-store"
            return response
    keys = ApiKey.objects.select_related("user").prefetch_related("agents")
    return render(request, "api/keys.html", {"form": form, "keys": keys, "now": timezone.now()})


@administrators
@require_http_methods(["GET", "POST"])
def key_revoke_view(request: HttpRequest, key_id: int) -> HttpResponse:
    key = ApiKey.objects.filter(pk=key_id).first()
    if key is None:
        raise Http404(_("No such API key in this tenant."))
    if request.method == "POST":
        key_revoke(key=key)
        messages.success(request, _("The key “%(name)s” was revoked; programs using it are refused from now on.")
                         % {"name": key.name})  # fmt: skip
        return HttpResponseRedirect(reverse("api:keys"))
    return render(request, "api/confirm_revoke.html", {"key": key})
