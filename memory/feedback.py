"""Feedback on replies: a rater's thumbs up or down and comment on one assistant message, and the counts per agent
and version. Every surface (chat page, widget, API) records through `feedback_record`, which sends
memory.signals.feedback_given."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils.translation import gettext as _

from memory.models import Feedback, Message, Role
from memory.signals import feedback_given

MAX_COMMENT_CHARS = 2000


def feedback_record(*, message: Message, user: Any, rating: int, comment: str = "", source: str) -> Feedback:
    """Store `user`'s rating of the assistant reply `message` (replacing their earlier one) and send feedback_given.
    ValidationError for a message that is not a reply, a rating other than +1/-1 or a comment too long. The caller
    has checked that `user` may open the message's conversation."""
    if message.role != Role.ASSISTANT:
        raise ValidationError(_("Only a reply of the agent can be rated."), code="not_a_reply")
    if rating not in (1, -1) or isinstance(rating, bool):
        raise ValidationError(_("Rate with 1 (thumbs up) or -1 (thumbs down)."), code="bad_rating")
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise ValidationError(
            _("The comment is too long (at most %(max)s characters).") % {"max": MAX_COMMENT_CHARS},
            code="comment_too_long",
        )
    feedback, _created = Feedback.objects.update_or_create(
        tenant_id=message.tenant_id,
        message=message,
        user=user,
        defaults={"rating": rating, "comment": comment, "source": source},
    )
    feedback_given.send(sender=Message, message=message, rating=rating, comment=comment, source=source)
    return feedback


def parse_rating(value: Any) -> int | None:
    """A submitted rating as +1/-1 ("up", "down", 1, -1, "1", "-1"); None for anything else."""
    named = {"up": 1, "down": -1, "1": 1, "-1": -1, "+1": 1}
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value in (1, -1) else None
    if isinstance(value, str):
        return named.get(value.strip().lower())
    return None


def feedback_counts(*, agent_id: int) -> list[dict[str, Any]]:
    """Thumbs up and down of the scope's replies of one agent, per agent version (number None: its draft), newest
    version first."""
    rows = (
        Feedback.objects.filter(message__conversation__agent_id=agent_id)
        .values("message__conversation__version__number")
        .annotate(up=Count("id", filter=Q(rating=1)), down=Count("id", filter=Q(rating=-1)))
        .order_by("-message__conversation__version__number")
    )
    return [{"version": row["message__conversation__version__number"], "up": row["up"], "down": row["down"]}
            for row in rows]  # fmt: skip


def feedback_totals(*, agent_id: int) -> dict[str, int]:
    """Thumbs up and down of every version of one agent."""
    counts = feedback_counts(agent_id=agent_id)
    return {"up": sum(row["up"] for row in counts), "down": sum(row["down"] for row in counts)}


def feedback_annotations() -> dict[str, Coalesce]:
    """Thumbs up and down of every version of an agent as two annotations of an Agent queryset (`feedback_up`,
    `feedback_down`): one query for a whole list instead of one per agent."""

    def rated(rating: int) -> Coalesce:
        counted = (
            Feedback.objects.filter(message__conversation__agent_id=OuterRef("pk"), rating=rating)
            .order_by()
            .values("message__conversation__agent_id")
            .annotate(n=Count("id"))
            .values("n")[:1]
        )
        return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))

    return {"feedback_up": rated(1), "feedback_down": rated(-1)}
