from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # ready() registrations: imported here because the URLconf and the apps below load after this module.
        from django.urls import reverse

        from memory.links import register_conversation_page
        from tenants.navigation import HomeCard, register_card

        # The agent pages (a floor below) link to conversations through memory.links.
        register_conversation_page(lambda conversation: reverse("chat:conversation", args=[conversation.pk]))

        register_card(
            HomeCard(
                key="chat",
                title=_("Chat"),
                description=_("Talk with the tenant's agents; replies stream in as they are written."),
                url_name="chat:list",
                order=10,
            )
        )
