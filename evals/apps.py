from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EvalsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "evals"
    verbose_name = _("Evaluation")

    def ready(self) -> None:
        # The run's Celery task registers by import; the publish gate fills the agents app's slot (agents sits
        # below evals and does not import it).
        # The views register the agent page's evaluation panel (agents.sections) at import: here, so the panel is
        # there even before the URLs are loaded.
        from agents.publishgate import register_publish_gate
        from evals import gate, tasks, views  # noqa: F401
        from evals.demo import RESTAURANT_PACK, seed_sample_evaluation
        from tenants.demo import register_demo_seeder

        register_publish_gate(gate.decide)
        # The restaurant waiter's sample dataset (after the pack's own seeder, which makes the waiter: evals is
        # installed after the packs, and seeders run in registration order).
        register_demo_seeder(seed_sample_evaluation, pack=RESTAURANT_PACK)
