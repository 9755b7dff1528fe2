from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PlansConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "plans"
    verbose_name = _("Plans")

    def ready(self) -> None:
        from agents.runtime import register_turn_runner
        from plans.planner import run_planner_turn

        register_turn_runner("planner", run_planner_turn)
