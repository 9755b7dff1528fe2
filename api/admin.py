"""API keys in the admin: listed without their secret; adding one shows the secret once, on the answer page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from api.keys import hash_secret, key_limit_check, key_revoke, new_secret
from api.models import ApiKey, KeyScope
from tenants.admin import TenantOwnedAdmin


class ApiKeyAdminForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        label=_("scopes"), choices=KeyScope.choices, widget=forms.CheckboxSelectMultiple,
        initial=[KeyScope.READ, KeyScope.CHAT],
    )  # fmt: skip

    class Meta:
        model = ApiKey
        fields = ["tenant", "name", "scopes", "agents", "expires_at"]
        widgets = {"agents": forms.CheckboxSelectMultiple}

    def clean(self) -> dict:
        cleaned = super().clean()
        tenant = cleaned.get("tenant") or getattr(self, "request_tenant", None)
        if self.instance.pk is None and tenant is not None:
            key_limit_check(tenant=tenant)  # the tenant's API_TENANT_MAX_KEYS
        return cleaned


@admin.register(ApiKey)
class ApiKeyAdmin(TenantOwnedAdmin):
    form = ApiKeyAdminForm
    list_display = ["name", "prefix_shown", "scopes", "user", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix_shown", "user", "revoked_at", "last_used_at", "created_at"]
    actions = ["revoke"]

    @admin.display(description=_("prefix"))
    def prefix_shown(self, key: ApiKey) -> str:
        return f"{key.prefix}…" if key.prefix else "—"

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, **kwargs: Any) -> type[forms.ModelForm]:
        form = super().get_form(request, obj, **kwargs)
        form.request_tenant = getattr(request, "tenant", None)  # a tenant admin's form has no tenant field
        return form

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        fields = list(super().get_fields(request, obj))
        if obj is None:  # on creation, who it acts as is the one creating it
            fields = [name for name in fields if name not in self.readonly_fields]
        return fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        if not change:
            obj.user = request.user
            obj.prefix, obj._secret = new_secret()
            obj.secret_hash = hash_secret(obj._secret)
        super().save_model(request, obj, form, change)

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        # The secret is in this answer only: not in a redirect, a message (kept in a cookie) or the log.
        response = render(request, "api/created.html", {"key": obj, "secret": obj._secret, "from_admin": True})
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description=_("Revoke the selected keys"))
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for key in queryset.filter(revoked_at__isnull=True):
            key_revoke(key=key)
        self.message_user(request, _("Revoked at %(time)s.") % {"time": timezone.now().strftime("%H:%M")})
