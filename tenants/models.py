from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from tenants.managers import TenantScopedManager, ensure_scope_allows
from tenants.scope import current_tenant


class Tenant(models.Model):
    """An organisation: everything it owns carries it, and nothing crosses to another."""

    name = models.CharField(_("name"), max_length=120)
    slug = models.SlugField(_("slug"), max_length=60, unique=True)
    active = models.BooleanField(_("active"), default=True, help_text=_("An inactive tenant's users cannot use it."))
    monthly_token_budget = models.PositiveBigIntegerField(
        _("monthly token budget"),
        default=2_000_000,
        validators=[MinValueValidator(0)],
        help_text=_("Model tokens (prompt + completion) the tenant may use per calendar month; 0 means no calls."),
    )
    # The keys of the packs enabled for the tenant (tenants.packs); only platform superusers change them.
    packs = models.JSONField(
        _("packs"),
        default=list,
        blank=True,
        help_text=_("The packs whose tools, admin pages, workflow templates and demo data this tenant gets."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("tenant")
        verbose_name_plural = _("tenants")

    def __str__(self) -> str:
        return self.name

    def has_pack(self, key: str) -> bool:
        """Whether the pack `key` is enabled for this tenant ("", the platform itself, always is); the registries of
        what packs contribute ask `tenants.packs.pack_enabled`, which also answers for no tenant."""
        return not key or key in (self.packs or [])


class Role(models.TextChoices):
    OWNER = "owner", pgettext_lazy("role", "Owner")
    ADMIN = "admin", pgettext_lazy("role", "Admin")
    MEMBER = "member", pgettext_lazy("role", "Member")


class Membership(models.Model):
    """A user's place in a tenant. A user may belong to several tenants, with one role in each."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("user")
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("tenant"))
    role = models.CharField(_("role"), max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(_("joined"), auto_now_add=True)

    class Meta:
        ordering = ["tenant__name", "user__username"]
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user_tenant")]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.get_role_display()})"

    @property
    def can_administer(self) -> bool:
        """Owners and admins manage the tenant (its admin pages, agents, providers, members)."""
        return self.role in (Role.OWNER, Role.ADMIN)


class TenantOwned(models.Model):
    """Base of every tenant-owned model: the tenant column, the scoped manager and the write checks."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="+", verbose_name=_("tenant"), editable=True
    )

    objects = TenantScopedManager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs) -> None:
        if self.tenant_id is None:
            tenant = current_tenant()
            if tenant is not None:
                self.tenant = tenant
        ensure_scope_allows(self.tenant_id)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        ensure_scope_allows(self.tenant_id)
        return super().delete(*args, **kwargs)

    def clean(self) -> None:
        super().clean()
        if self.tenant_id is None:
            tenant = current_tenant()
            if tenant is not None:
                self.tenant = tenant
        self._check_related_tenants()

    def _check_related_tenants(self) -> None:
        """A tenant-owned row may only point at rows of its own tenant."""
        errors = {}
        for field in self._meta.concrete_fields:
            if not field.is_relation or field.name == "tenant":
                continue
            related = field.related_model
            if not (isinstance(related, type) and issubclass(related, TenantOwned)):
                continue
            value_id = getattr(self, field.attname)
            if value_id is None or self.tenant_id is None:
                continue
            # Django's base manager is unscoped: this reads one tenant id to compare, nothing more.
            related_tenant = related._base_manager.filter(pk=value_id).values_list("tenant_id", flat=True).first()
            if related_tenant is not None and related_tenant != self.tenant_id:
                errors[field.name] = _("Choose an item of this tenant.")
        if errors:
            raise ValidationError(errors)
