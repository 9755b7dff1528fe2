from pathlib import Path

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RestaurantConfig(AppConfig):
    name = "agents.packs.restaurant"
    label = "restaurant"
    verbose_name = _("Restaurant")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.packs.restaurant import PACK, functions, tools  # noqa: F401 - register the pack's tools
        from agents.packs.restaurant.demo import seed_restaurant_demo
        from agents.workflows.templates import WorkflowTemplate, register_template
        from tenants.demo import register_demo_seeder
        from tenants.packs import Pack, register_pack

        register_pack(
            Pack(
                key=PACK,
                name=_("Restaurant"),
                description=_("A menu and orders, the waiter's tools menu, order and checkout, and the menu "
                              "recommendation and customer marketing workflow templates."),
            )
        )  # fmt: skip
        folder = Path(__file__).resolve().parent / "workflows"
        for key, label in (
            ("menu_recommendation", _("Menu recommendation (菜单推荐工作流)")),
            ("customer_marketing", _("Customer marketing (客户营销工作流)")),
        ):
            register_template(WorkflowTemplate(key=key, label=label, path=folder / f"{key}.yaml", pack=PACK))
        register_demo_seeder(seed_restaurant_demo, pack=PACK)
