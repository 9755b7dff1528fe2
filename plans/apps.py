from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PlansConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "plans"
    verbose_name = _("Plans")

    def ready(self) -> None:
        from plans import planner  # noqa: F401 - registers the planner's turn runner
