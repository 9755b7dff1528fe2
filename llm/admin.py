"""Admin for model providers (the API key is write-only) and the model-call log."""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from core.bounded import BoundedJSONFormField
from llm.models import LLMCall, ModelProvider
from llm.services import base_url_refused, provider_save
from tenants.admin import TenantOwnedAdmin
from tenants.admin_site import is_platform_admin


class ModelProviderForm(forms.ModelForm):
    """The provider form: the API key can be replaced or cleared, never read back."""

    api_key = forms.CharField(
        label=_("API key"),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=_("Stored encrypted and never shown again. Leave empty to keep the current key."),
    )
    base_url = forms.URLField(
        label=ModelProvider._meta.get_field("base_url").verbose_name,
        required=False,
        assume_scheme="https",
        max_length=300,
        help_text=ModelProvider._meta.get_field("base_url").help_text,
    )
    clear_api_key = forms.BooleanField(label=_("Remove the stored API key"), required=False)
    chat_models = BoundedJSONFormField(
        label=_("chat models"),
        required=False,
        initial=list,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "style": "font-family: monospace"}),
        help_text=ModelProvider._meta.get_field("chat_models").help_text,
    )

    class Meta:
        model = ModelProvider
        fields = [
            "tenant", "name", "kind", "base_url", "api_key", "clear_api_key", "chat_models", "default_chat_model",
            "embedding_model", "planning_model", "execution_model", "reasoning_model", "is_default",
            "timeout_seconds", "max_retries", "private_network_allowed",
        ]  # fmt: skip

    def clean(self):
        cleaned = super().clean()
        candidate = ModelProvider(
            kind=cleaned.get("kind", self.instance.kind),
            base_url=cleaned.get("base_url") or "",
            private_network_allowed=cleaned.get("private_network_allowed", self.instance.private_network_allowed),
        )
        refused = base_url_refused(candidate)
        if refused:
            self.add_error("base_url", refused)
        return cleaned

    def clean_chat_models(self):
        value = self.cleaned_data.get("chat_models")
        if value in (None, ""):
            return []
        if isinstance(value, str):
            value = json.loads(value)
        return value


@admin.register(ModelProvider)
class ModelProviderAdmin(TenantOwnedAdmin):
    form = ModelProviderForm
    list_display = ["__str__", "kind", "base_url", "default_chat_model", "is_default", "api_key_status", "updated_at"]
    list_filter = ["kind", "is_default"]
    search_fields = ["name", "base_url", "default_chat_model"]
    readonly_fields = ["api_key_status"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "tenant",
                    "name",
                    "kind",
                    "base_url",
                    "api_key_status",
                    "api_key",
                    "clear_api_key",
                    "is_default",
                ]
            },
        ),
        (_("Models"), {"fields": ["chat_models", "default_chat_model", "embedding_model"]}),
        (
            _("Model tiers (planner, executor, deep reasoning)"),
            {"fields": ["planning_model", "execution_model", "reasoning_model"]},
        ),
        (_("Connection"), {"fields": ["timeout_seconds", "max_retries", "private_network_allowed"]}),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        # A tenant admin must not open the platform's own network to the tenant's requests.
        return readonly if is_platform_admin(request) else [*readonly, "private_network_allowed"]

    @admin.display(description=_("API key"))
    def api_key_status(self, obj: ModelProvider | None) -> str:
        if obj is None or not obj.pk:
            return "—"
        return str(_("set")) if obj.has_api_key else str(_("not set"))

    def save_model(self, request: HttpRequest, obj: ModelProvider, form, change: bool) -> None:
        if not is_platform_admin(request):
            obj.tenant = request.tenant
        provider_save(
            provider=obj,
            api_key=form.cleaned_data.get("api_key") or None,
            clear_api_key=bool(form.cleaned_data.get("clear_api_key")),
        )
        if obj.key_dropped:
            messages.warning(
                request,
                _("The base URL changed, so the stored API key was removed: enter the key for the new server."),
            )


@admin.register(LLMCall)
class LLMCallAdmin(TenantOwnedAdmin):
    """The model-call log: read only."""

    list_display = [
        "created_at", "model", "purpose", "status", "error_code", "prompt_tokens", "completion_tokens",
        "usage_source", "ttft_ms", "duration_ms", "agent_id", "conversation_id",
    ]  # fmt: skip
    list_filter = ["status", "purpose", "error_code", "usage_source", "model", "created_at"]
    search_fields = ["model", "error_code"]
    date_hierarchy = "created_at"
    list_select_related = ["provider"]

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return is_platform_admin(request)
