from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class WidgetConfig(AppConfig):
    name = "widget"
    verbose_name = _("Website widget")
    default_auto_field = "django.db.models.BigAutoField"
