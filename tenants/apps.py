from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = _("Tenants")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from tenants import rls
        from tenants.admin_site import is_platform_admin, is_tenant_admin
        from tenants.axes_names import name_axes_app
        from tenants.navigation import HomeCard, register_card

        rls.connect_signals()
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
