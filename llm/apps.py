from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LlmConfig(AppConfig):
    name = "llm"
    verbose_name = _("Models")
    default_auto_field = "django.db.models.BigAutoField"
