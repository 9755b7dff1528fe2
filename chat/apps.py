from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tenants.navigation import HomeCard, register_card

        register_card(
            HomeCard(
                key="chat",
                title=_("Chat"),
                description=_("Talk with the tenant's agents; replies stream in as they are written."),
                url_name="chat:list",
                order=10,
            )
        )
