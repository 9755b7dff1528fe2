from pathlib import Path

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EnergyConfig(AppConfig):
    name = "agents.packs.energy"
    label = "energy"
    verbose_name = _("Energy")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.packs.energy import PACK, tools  # noqa: F401 - registers the pack's tools
        from agents.packs.energy.demo import seed_energy_demo
        from agents.workflows.templates import WorkflowTemplate, register_template
        from tenants.demo import register_demo_seeder
        from tenants.packs import Pack, register_pack

        register_pack(
            Pack(
                key=PACK,
                name=_("Energy"),
                description=_("PV economics, sensitivity and report tools, the PV economics workflow template and "
                              "the energy demo's planner."),
            )
        )  # fmt: skip
        register_template(
            WorkflowTemplate(
                key="pv_economics",
                label=_("PV economics (光伏经济性测算)"),
                path=Path(__file__).resolve().parent / "workflows" / "pv_economics.yaml",
                pack=PACK,
            )
        )
        register_demo_seeder(seed_energy_demo, pack=PACK)
