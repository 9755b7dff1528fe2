from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = _("Memory")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memory import signals, traces
        from tenants.navigation import HomeCard, register_card

        # Feedback on a reply becomes a span of its own when traces are on (docs/observability.md).
        signals.feedback_given.connect(traces.feedback_exported, dispatch_uid="memory.traces.feedback")

        # Every member sees (and may delete) what the agents remember of them, and only that.
        register_card(
            HomeCard(
                key="memory",
                title=_("Memory"),
                description=_("What the agents remember of you: events, memories and dreams; delete any of them."),
                url_name="memory:index",
                order=50,
            )
        )
