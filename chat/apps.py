from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = _("Chat")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.urls import reverse

        from chat.turns import run_server_turn
        from memory.links import register_conversation_page
        from plans.tasks import register_server_turn
        from tenants.navigation import HomeCard, register_card

        # The agent pages (a floor below) link to conversations through memory.links.
        register_conversation_page(lambda conversation: reverse("chat:conversation", args=[conversation.pk]))

        # The plan ask timeout's "no reply" runs as a chat turn: streamed to open pages, never beside the user's.
        register_server_turn(run_server_turn)

        # A membership removed or changed closes the user's open chat sockets of that tenant (every process).
        from django.db.models.signals import post_delete, post_save

        from chat.streams import membership_changed
        from tenants.models import Membership

        post_save.connect(membership_changed, sender=Membership, dispatch_uid="chat-membership-saved")
        post_delete.connect(membership_changed, sender=Membership, dispatch_uid="chat-membership-deleted")

        register_card(
            HomeCard(
                key="chat",
                title=_("Chat"),
                description=_("Talk with the tenant's agents; replies stream in as they are written."),
                url_name="chat:list",
                order=10,
            )
        )
