from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EnergyConfig(AppConfig):
    name = "agents.packs.energy"
    label = "energy"
    verbose_name = _("Energy")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.packs.energy import tools  # noqa: F401 - registers the pack's tools
        from agents.packs.energy.demo import seed_energy_demo
        from tenants.demo import register_demo_seeder

        register_demo_seeder(seed_energy_demo)
