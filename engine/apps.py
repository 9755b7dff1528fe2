from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class EngineConfig(AppConfig):
    """The turn engine: submission, the frame log, the bus and the sinks that run every turn, below both of its
    surfaces (chat's pages and sockets, api's REST and OpenAI-compatible endpoints)."""

    name = "engine"
    verbose_name = _("Turn engine")

    def ready(self) -> None:
        # ready() registrations: imported here because models and the apps below must be loaded first.
        from django.db.models.signals import post_delete, post_save

        from engine.streams import membership_changed
        from engine.turns import run_server_turn
        from plans.tasks import register_server_turn
        from tenants.models import Membership

        # The plan ask timeout's "no reply" runs as a turn: streamed to open pages, never beside the user's.
        register_server_turn(run_server_turn)

        # A membership removed or changed closes the user's open chat sockets of that tenant (every process).
        post_save.connect(membership_changed, sender=Membership, dispatch_uid="chat-membership-saved")
        post_delete.connect(membership_changed, sender=Membership, dispatch_uid="chat-membership-deleted")
