from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WidgetConfig(AppConfig):
    name = "widget"
    verbose_name = _("Website widget")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ready() registrations: the models load after this module.
        from tenants.services import register_tenant_cleanup
        from widget.visitors import tenant_visitors_delete

        register_tenant_cleanup(tenant_visitors_delete)
