from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ToolServersConfig(AppConfig):
    name = "toolservers"
    verbose_name = _("MCP servers")
    default_auto_field = "django.db.models.BigAutoField"
