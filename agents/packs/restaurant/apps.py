from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class RestaurantConfig(AppConfig):
    name = "agents.packs.restaurant"
    label = "restaurant"
    verbose_name = _("Restaurant")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents.packs.restaurant import tools  # noqa: F401 - registers the pack's tools
        from agents.packs.restaurant.demo import seed_restaurant_demo
        from tenants.demo import register_demo_seeder

        register_demo_seeder(seed_restaurant_demo)
