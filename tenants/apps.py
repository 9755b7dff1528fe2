from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = _("Tenants")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_migrate

        from tenants import rls
        from tenants.admin_site import is_platform_admin, is_tenant_admin
        from tenants.axes_names import name_axes_app
        from tenants.generation import bump_on_change, user_tenants
        from tenants.models import Membership, Tenant
        from tenants.navigation import HomeCard, register_card

        rls.connect_signals()
        # What requests keep of a tenant's rows (tenants.generation) follows its changes: the tenant (active, budget,
        # packs), its members (roles, leaving) and their accounts (a deactivated user's keys stop at once).
        bump_on_change(Tenant, lambda tenant: (tenant.pk,))
        bump_on_change(Membership)
        bump_on_change(get_user_model(), user_tenants, fields=("is_active", "is_superuser"))
        name_axes_app()
        post_migrate.connect(rls.post_migrate_policies, sender=self, dispatch_uid="tenants.rls.policies")

        register_card(
            HomeCard(
                key="admin",
                title=_("Admin"),
                description=_("Members, quotas and every record of the tenant, in the control room."),
                url_name="admin:index",
                order=900,
                visible=lambda request: is_platform_admin(request) or is_tenant_admin(request),
            )
        )
