"""Admin for tenants, and the one mixin that makes any tenant-owned model safe in the admin (T3)."""

from __future__ import annotations

from typing import Any, Protocol

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Count, Q
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from core.bounded import BoundedJSONFormField
from core.registry import Slot
from tenants.admin_site import is_platform_admin, is_tenant_admin
from tenants.models import Membership, Role, Tenant, TenantOwned
from tenants.packs import all_packs, pack_enabled, pack_name, pack_of_model
from tenants.services import tenant_delete


def _without_tenant(names) -> list:
    return [name for name in names if name != "tenant"]


class TenantOwnedAdminMixin:
    """For every tenant-owned model admin and inline.

    JSON fields answer too deep a document with a field error (core.bounded), not a 500.

    Platform superusers: a tenant column and filter, the tenant chosen on creation and fixed afterwards.
    Tenant owners and admins: their tenant's rows only (the request's tenant scope does the filtering), the
    tenant field hidden and set for them, foreign-key choices limited to their tenant.
    """

    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONFormField}}

    def get_list_display(self, request: HttpRequest):
        names = list(super().get_list_display(request))
        return [*names, "tenant"] if is_platform_admin(request) and "tenant" not in names else names

    def get_list_filter(self, request: HttpRequest):
        names = list(super().get_list_filter(request))
        return [*names, "tenant"] if is_platform_admin(request) and "tenant" not in names else names

    def get_exclude(self, request: HttpRequest, obj=None):
        exclude = list(super().get_exclude(request, obj) or [])
        return exclude if is_platform_admin(request) else [*exclude, "tenant"]

    def get_fields(self, request: HttpRequest, obj=None):
        fields = super().get_fields(request, obj)
        return fields if is_platform_admin(request) else _without_tenant(fields)

    def get_fieldsets(self, request: HttpRequest, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if is_platform_admin(request):
            return fieldsets
        return [(name, {**opts, "fields": _without_tenant(opts["fields"])}) for name, opts in fieldsets]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        readonly = list(super().get_readonly_fields(request, obj))
        # Moving a row to another tenant would leave its relations behind: the tenant is fixed once saved.
        if obj is not None and obj.pk and is_platform_admin(request):
            readonly.append("tenant")
        return readonly

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        related = db_field.related_model
        if not is_platform_admin(request) and issubclass(related, TenantOwned):
            kwargs["queryset"] = related.objects.filter(tenant=request.tenant)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request: HttpRequest, **kwargs):
        related = db_field.related_model
        if not is_platform_admin(request) and issubclass(related, TenantOwned):
            kwargs["queryset"] = related.objects.filter(tenant=request.tenant)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def _may_administer(self, request: HttpRequest) -> bool:
        if is_platform_admin(request):
            return True
        # A pack's models (tenants.packs) exist for a tenant only when the platform operator enabled the pack.
        return is_tenant_admin(request) and pack_enabled(request.tenant, pack_of_model(self.model))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_administer(request)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_administer(request)

    def has_add_permission(self, request: HttpRequest, *args) -> bool:
        return self._may_administer(request)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_administer(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_administer(request)


class TenantOwnedAdmin(TenantOwnedAdminMixin, admin.ModelAdmin):
    """ModelAdmin for tenant-owned models."""

    def save_model(self, request: HttpRequest, obj, form, change: bool) -> None:
        if not is_platform_admin(request):
            obj.tenant = request.tenant
        super().save_model(request, obj, form, change)

    def save_formset(self, request: HttpRequest, form, formset, change: bool) -> None:
        # Inline rows belong to the parent's tenant, whoever edits them.
        instances = formset.save(commit=False)
        for instance in instances:
            if isinstance(instance, TenantOwned) and instance.tenant_id is None:
                instance.tenant_id = form.instance.tenant_id
            instance.save()
        for deleted in formset.deleted_objects:
            deleted.delete()
        formset.save_m2m()


class MembershipForm(forms.ModelForm):
    """Members are added by username, so a tenant admin never sees the platform's list of users."""

    username = forms.CharField(label=_("username"), max_length=150)

    class Meta:
        model = Membership
        fields = ["username", "role"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["username"].initial = self.instance.user.get_username()

    def clean_username(self) -> str:
        username = self.cleaned_data["username"].strip()
        users = get_user_model().objects.filter(username=username)
        acting = getattr(self, "acting_membership", None)
        if acting is not None and not (self.instance.pk and self.instance.user.get_username() == username):
            # A tenant admin adds people who belong to no tenant yet (accounts made for them) or who share a tenant
            # with them; anyone else answers like a missing name, so the form does not tell who exists elsewhere.
            shared = Membership.objects.filter(user_id=acting.user_id).values("tenant_id")
            users = users.filter(Q(memberships__isnull=True) | Q(memberships__tenant_id__in=shared)).distinct()
        user = users.first()
        if user is None:
            raise forms.ValidationError(
                _("No user named “%(username)s” can be added here. The platform operator creates accounts and adds "
                  "people from other organisations."),
                params={"username": username},
            )  # fmt: skip
        self.instance.user = user
        return username

    def clean(self):
        cleaned = super().clean()
        acting = getattr(self, "acting_membership", None)
        if acting is not None and acting.role != Role.OWNER and self.has_changed():
            was_owner = bool(self.instance.pk) and self.initial.get("role") == Role.OWNER
            becomes_owner = cleaned.get("role") == Role.OWNER
            # Saving the page with an owner's row untouched is fine; granting, changing or reassigning one is not.
            if becomes_owner != was_owner or (was_owner and "username" in self.changed_data):
                raise forms.ValidationError(_("Only an owner can grant or change the owner role."))
        return cleaned


class MembershipInline(admin.TabularInline):
    model = Membership
    form = MembershipForm
    extra = 1
    fields = ["username", "role", "created_at"]
    readonly_fields = ["created_at"]

    def get_formset(self, request: HttpRequest, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        acting = None if is_platform_admin(request) else request.membership

        class RequestFormSet(formset):
            def _construct_form(self, i, **form_kwargs):
                form = super()._construct_form(i, **form_kwargs)
                form.acting_membership = acting
                return form

            def clean(self):
                super().clean()
                if acting is not None and acting.role != Role.OWNER:
                    for form in self.deleted_forms:
                        if form.instance.pk and form.initial.get("role") == Role.OWNER:
                            raise forms.ValidationError(_("Only an owner can remove an owner."))

        return RequestFormSet

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).select_related("user")

    def _may_manage_members(self, request: HttpRequest, obj=None) -> bool:
        if is_platform_admin(request):
            return True
        return is_tenant_admin(request) and (obj is None or obj.pk == request.tenant.pk)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_manage_members(request, obj)

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_manage_members(request, obj)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_manage_members(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return self._may_manage_members(request, obj)


class TenantUsage(Protocol):
    """Token usage as the tenant admin shows it; llm (a floor above) registers its own (llm.usage)."""

    def tokens_this_month_subquery(self) -> Any: ...

    def budget_cell(self, used: int, budget: int | None) -> str: ...

    def usage_chart(self, *, tenant: Tenant) -> Any: ...


_usage: Slot[TenantUsage] = Slot("the tenant admin's token usage (tenants.admin)", filled_by="the llm app (llm.apps)")


def register_tenant_usage(usage: TenantUsage) -> None:
    """Show this usage in the tenant admin (its column, ordering and chart); called from llm's AppConfig.ready()."""
    _usage.register(usage)


class TenantForm(forms.ModelForm):
    """The packs as checkboxes of the registered packs (the field stores their keys)."""

    packs = forms.MultipleChoiceField(
        label=_("packs"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=Tenant._meta.get_field("packs").help_text,
    )

    class Meta:
        model = Tenant
        fields = ["name", "slug", "active", "monthly_token_budget", "packs"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "packs" in self.fields:
            self.fields["packs"].choices = [
                (pack.key, f"{pack.name} — {pack.description}" if pack.description else str(pack.name))
                for pack in all_packs()
            ]

    def clean_packs(self) -> list[str]:
        return sorted(self.cleaned_data.get("packs") or [])


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    form = TenantForm
    list_display = [
        "name", "slug", "active", "monthly_token_budget", "tokens_this_month", "enabled_packs", "member_count",
        "created_at",
    ]  # fmt: skip
    list_filter = ["active"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    @admin.display(description=_("members"), ordering="member_count")
    def member_count(self, obj: Tenant) -> int:
        return obj.member_count

    @admin.display(description=_("packs"))
    def enabled_packs(self, obj: Tenant) -> str:
        return ", ".join(pack_name(key) for key in obj.packs or []) or "—"

    @admin.display(description=_("tokens this month / budget"), ordering="tokens_month")
    def tokens_this_month(self, obj: Tenant) -> str:
        return _usage.get().budget_cell(obj.tokens_month, obj.monthly_token_budget)

    def delete_model(self, request: HttpRequest, obj: Tenant) -> None:
        tenant_delete(tenant=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for tenant in queryset:
            tenant_delete(tenant=tenant)

    def change_view(self, request: HttpRequest, object_id, form_url="", extra_context=None):
        # The tokens-per-day chart (T5, L3) under the tenant's fields; only for a tenant this user may see.
        tenant = self.get_object(request, object_id)
        extra_context = dict(extra_context or {})
        if tenant is not None and self.has_view_permission(request, tenant):
            extra_context["llm_usage"] = _usage.get().usage_chart(tenant=tenant)
        return super().change_view(request, object_id, form_url, extra_context)

    def get_queryset(self, request: HttpRequest):
        tokens = _usage.get().tokens_this_month_subquery()
        queryset = super().get_queryset(request).annotate(member_count=Count("memberships"), tokens_month=tokens)
        if is_platform_admin(request):
            return queryset
        return queryset.filter(pk=request.tenant.pk) if request.tenant else queryset.none()

    def get_fields(self, request: HttpRequest, obj=None):
        fields = list(super().get_fields(request, obj))
        if is_platform_admin(request):
            return fields
        # Shown by name, read-only: a tenant's own admins cannot enable a pack.
        return [name for name in fields if name != "packs"]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        if is_platform_admin(request):
            return []
        # The platform sets the quota, the packs and the tenant's identity; the tenant's admins manage its members.
        return ["slug", "active", "monthly_token_budget", "packs", "enabled_packs"]

    def get_prepopulated_fields(self, request: HttpRequest, obj=None):
        return self.prepopulated_fields if is_platform_admin(request) else {}

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_platform_admin(request) or is_tenant_admin(request)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return is_platform_admin(request) or (is_tenant_admin(request) and (obj is None or obj.pk == request.tenant.pk))

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return self.has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return is_platform_admin(request)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return is_platform_admin(request)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Platform-wide list of memberships; tenant admins manage theirs inline on their tenant's page."""

    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__name"]
    raw_id_fields = ["user"]
    list_select_related = ["user", "tenant"]
