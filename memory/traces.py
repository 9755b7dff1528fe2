"""What long-term memory's spans say (core.tracing; docs/observability.md), and feedback on a reply exported as a
span of its own (memory.signals.feedback_given, connected in the memory app's ready()).

Counts and ids always; the memories' text and a feedback comment only with TRACES_CAPTURE_CONTENT."""

from __future__ import annotations

from collections import Counter
from typing import Any

from core import tracing


def recall_attributes(conversation: Any, query: str, **_: Any) -> dict[str, Any]:
    return {
        "agentplat.memory.agent_id": conversation.agent_id,
        "agentplat.memory.user_id": conversation.user_id,
        "agentplat.memory.plan_step": bool(conversation.parent_id),
        "gen_ai.retrieval.query.text": tracing.text(query),
    }


def recall_result(recalled: Any) -> dict[str, Any]:
    kinds = Counter(item["kind"] for item in recalled.used)
    return {
        "agentplat.memory.hits": len(recalled.used),
        "agentplat.memory.events": kinds.get("event", 0),
        "agentplat.memory.memories": kinds.get("memory", 0),
        "agentplat.memory.turns": kinds.get("turn", 0),
        "agentplat.memory.lines": tracing.text(recalled.lines) if recalled.lines else None,
    }


def feedback_exported(sender: Any, *, message: Any, rating: int, comment: str = "", source: str = "", **_: Any) -> None:
    """A short span "feedback" for a rated reply (traces on), with the rating, where it was given and whose reply it
    rated; the comment only with content capture."""
    if not tracing.enabled():
        return
    conversation_id = message.conversation_id
    attributes = {
        "agentplat.feedback.rating": int(rating),
        "agentplat.feedback.source": source or None,
        "agentplat.feedback.has_comment": bool(comment),
        "agentplat.feedback.comment": tracing.text(comment) if comment else None,
        "agentplat.message.id": message.pk,
        "gen_ai.conversation.id": str(conversation_id) if conversation_id else None,
        "agentplat.tenant.id": str(message.tenant_id) if getattr(message, "tenant_id", None) else None,
    }
    attributes.update(_conversation_attributes(message))
    # In the rated turn's trace when its reply was stored with traces on (a span of its own otherwise).
    parent = {"traceparent": message.trace_parent} if message.trace_parent else None
    with tracing.resumed(parent), tracing.span("feedback", attributes):
        tracing.event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "user_feedback",
                                                   "gen_ai.evaluation.score.value": float(rating)})  # fmt: skip


def _conversation_attributes(message: Any) -> dict[str, Any]:
    """The rated reply's agent and user, read from its conversation (already loaded by whoever sent the signal,
    or one query)."""
    conversation = message.conversation
    return {
        "gen_ai.agent.id": str(conversation.agent_id) if conversation.agent_id else None,
        "user.id": str(conversation.user_id) if conversation.user_id else None,
    }
