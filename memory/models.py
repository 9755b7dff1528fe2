"""Conversations, their messages and context window (seed 4, section 4.1), and the overflow metrics (M4).

Memory sits below agents: agents are referenced by the string "agents.Agent", never imported.
"""

from __future__ import annotations

import uuid
from pathlib import PurePosixPath
from typing import Any, ClassVar

from django.conf import settings
from django.db import models, transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from knowledge.fields import EmbeddingField
from llm.messages import Role as ChatRole
from memory.overflow import STRATEGY_CHOICES, STRATEGY_NONE, StoredMessage
from memory.storage import attachment_storage
from tenants.models import TenantOwned


class ConversationSource(models.TextChoices):
    """Where a conversation was started: the chat page, the API, or a website's embedded widget."""

    CHAT = "chat", _("chat page")
    API = "api", _("API")
    WIDGET = "widget", _("website widget")
    MCP = "mcp", _("MCP")
    # An evaluation run's own conversation (evals): never listed with a person's, long-term memory off.
    EVAL = "eval", _("evaluation")


class Visitor(TenantOwned):
    """A website visitor of an embedded widget: the embed it came through and a hash of the random id its browser
    keeps (the id itself is never stored). Made with its first message, never on a page load; its own inactive
    account (never a member, never able to log in) owns its conversations, so long-term memory is per visitor."""

    # widget.EmbedToken sits on a floor above memory: a plain id, as llm.LLMCall keeps its agent's.
    embed_id = models.BigIntegerField(_("embed token id"), db_index=True)
    id_hash = models.CharField(_("hash of the visitor's id"), max_length=64)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("account")
    )
    created_at = models.DateTimeField(_("first message"), auto_now_add=True)

    class Meta:
        verbose_name = _("website visitor")
        verbose_name_plural = _("website visitors")
        constraints = [models.UniqueConstraint(fields=["embed_id", "id_hash"], name="memory_visitor_embed_hash")]

    def __str__(self) -> str:
        return f"{self.embed_id}.{self.id_hash[:8]}"


class Conversation(TenantOwned):
    """One user's conversation with one agent, pinned to the agent version (and strategy) it started with."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="conversations", verbose_name=_("agent")
    )
    version = models.ForeignKey(
        "agents.AgentVersion",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="conversations",
        verbose_name=_("agent version"),
        help_text=_("Empty: started from the unpublished draft."),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    provider = models.ForeignKey(
        "llm.ModelProvider",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("model provider"),
    )
    model = models.CharField(
        _("model"), max_length=200, blank=True, help_text=_("The model whose tokenizer counts this conversation.")
    )
    title = models.CharField(_("title"), max_length=200, blank=True)
    # A plan step's own conversation (the step agent's memory) points at the conversation whose plan it serves: it
    # is internal, never listed or opened as the user's chat; administrators reach it from the plan log.
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        verbose_name=_("parent conversation"),
        help_text=_("Set for a plan step's internal conversation: the conversation whose plan it serves."),
    )
    # An administrator trying an agent's unpublished draft from its page: no version, so each turn runs the draft as
    # it is now (agents.config.conversation_config); members never open one.
    is_test = models.BooleanField(
        _("test conversation"),
        default=False,
        help_text=_(
            "Started by an administrator from the agent's page to try its unpublished draft; members never see it."
        ),
    )
    source = models.CharField(
        _("source"), max_length=10, choices=ConversationSource.choices, default=ConversationSource.CHAT
    )
    # A website visitor's conversation (source widget); its user is the visitor's own account.
    visitor = models.ForeignKey(
        Visitor, on_delete=models.CASCADE, null=True, blank=True, related_name="conversations",
        verbose_name=_("website visitor"),
    )  # fmt: skip
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")

    def __str__(self) -> str:
        if self.parent_id and self.title.startswith("plan:"):
            # A plan step's conversation keeps the machine title "plan:<parent id>"; a reader gets words.
            return str(_("Plan step conversation"))
        if self.title:
            return self.title
        # Untitled until its first message names it; never the global id (it counts every tenant's conversations).
        when = timezone.localtime(self.created_at).strftime("%m-%d %H:%M") if self.created_at else ""
        return str(_("New conversation %(when)s")) % {"when": when}

    @property
    def memory_key(self) -> str:
        """Seed 0's memory key {agent}_{user}_{conversation}: agents never share memory."""
        return f"{self.agent_id}_{self.user_id}_{self.pk}"


class Role(models.TextChoices):
    """A stored message's role: the chat message roles (llm.messages.Role), labelled."""

    SYSTEM = ChatRole.SYSTEM, _("system")
    USER = ChatRole.USER, _("user")
    ASSISTANT = ChatRole.ASSISTANT, _("assistant")
    TOOL = ChatRole.TOOL, _("tool")


class MessageStatus(models.TextChoices):
    COMPLETE = "complete", _("complete")
    PARTIAL = "partial", _("partial")
    ERROR = "error", _("error")


class Message(TenantOwned):
    """One stored message; its token count is computed once, when it is created."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", verbose_name=_("conversation")
    )
    role = models.CharField(_("role"), max_length=10, choices=Role.choices)
    content = models.TextField(_("content"), blank=True)
    tool_calls = models.JSONField(_("tool calls"), null=True, blank=True)
    tool_call_id = models.CharField(_("tool call id"), max_length=200, blank=True)
    token_count = models.PositiveIntegerField(_("tokens"), default=0)
    client_id = models.CharField(
        _("client id"), max_length=100, null=True, blank=True, help_text=_("Makes a resent message idempotent.")
    )
    status = models.CharField(_("status"), max_length=10, choices=MessageStatus.choices, default=MessageStatus.COMPLETE)
    error_code = models.CharField(_("error code"), max_length=60, blank=True)
    usage = models.JSONField(_("usage"), null=True, blank=True)
    # A reply's place in its turn's trace (W3C traceparent; empty when traces were off): feedback on the reply is
    # recorded in that trace (memory.traces.feedback_exported).
    trace_parent = models.CharField(_("trace"), max_length=64, blank=True, default="", editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["conversation", "id"]
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        # A conversation's messages are read as a range of ids (the active suffix): one index serves it in order.
        indexes = [models.Index(fields=["conversation", "id"], name="memory_message_conv_id")]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "client_id"],
                condition=models.Q(client_id__isnull=False),
                name="memory_message_unique_client_id",
            )
        ]

    def __str__(self) -> str:
        return f"{self.get_role_display()}: {self.content[:60]}"

    def stored(self) -> StoredMessage:
        return StoredMessage(
            id=self.pk,
            role=self.role,
            content=self.content,
            tool_calls=self.tool_calls,
            tool_call_id=self.tool_call_id or None,
            token_count=self.token_count,
        )


class AttachmentKind(models.TextChoices):
    """What a sent file is (knowledge.files.FileKind's values)."""

    IMAGE = "image", _("image")
    DOCUMENT = "document", _("document")


def attachment_path(instance: Attachment, filename: str) -> str:
    """A stored file's name: the tenant's folder and a random name with the sniffed type's extension. Nothing of
    the name the user gave reaches the storage (no path, no traversal, no collision)."""
    suffix = PurePosixPath(filename).suffix.lower()
    suffix = suffix if suffix[1:].isalnum() and len(suffix) <= 6 else ""
    return f"{instance.tenant_id}/{uuid.uuid4().hex}{suffix}"


class Attachment(TenantOwned):
    """A file or an image sent in a conversation (docs/attachments.md): its bytes in the storage "attachments", what
    was read of it, and the user message it came with. Uploaded first (no message yet) or with its message; deleted
    with its conversation, its file with it (after the commit)."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="attachments",
        verbose_name=_("conversation"),
    )  # fmt: skip
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, null=True, blank=True, related_name="attachments",
        verbose_name=_("message"),
    )  # fmt: skip
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("uploaded by")
    )
    name = models.CharField(_("name"), max_length=255)
    kind = models.CharField(_("kind"), max_length=10, choices=AttachmentKind.choices)
    content_type = models.CharField(_("content type"), max_length=100)
    size = models.PositiveBigIntegerField(_("bytes"), default=0)
    sha256 = models.CharField(_("SHA-256"), max_length=64)
    file = models.FileField(_("file"), storage=attachment_storage, upload_to=attachment_path, max_length=200)
    width = models.PositiveIntegerField(_("width"), default=0)
    height = models.PositiveIntegerField(_("height"), default=0)
    pages = models.PositiveIntegerField(_("pages"), default=0)
    text = models.TextField(_("text read"), blank=True)
    from_ocr = models.BooleanField(_("read by OCR"), default=False)
    token_count = models.PositiveIntegerField(
        _("tokens"), default=0, help_text=_("What the file adds to its message in the model's request.")
    )
    indexed = models.BooleanField(
        _("indexed"), default=False, help_text=_("A large document: each turn gets its best passages instead.")
    )
    created_at = models.DateTimeField(_("uploaded"), auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name = _("attachment")
        verbose_name_plural = _("attachments")
        indexes = [models.Index(fields=["created_at"], name="memory_attachment_created")]

    def __str__(self) -> str:
        return self.name


@receiver(post_delete, sender=Attachment, dispatch_uid="memory.attachment_file_deleted")
def _attachment_file_deleted(sender: type[Attachment], instance: Attachment, **kwargs: Any) -> None:
    """A deleted attachment's file leaves the storage once the deletion commits (a rolled-back deletion keeps it)."""
    name, storage = instance.file.name, instance.file.storage
    if name:
        transaction.on_commit(lambda: storage.delete(name), using=kwargs.get("using"))


class AttachmentPassage(TenantOwned):
    """A passage of a large document sent in a conversation, found by keyword and vector for each turn and cited
    "[name p.N]" (memory.attachments)."""

    attachment = models.ForeignKey(
        Attachment, on_delete=models.CASCADE, related_name="passages", verbose_name=_("attachment")
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="+", verbose_name=_("conversation")
    )
    position = models.PositiveIntegerField(_("position"))
    page = models.PositiveIntegerField(_("page"), null=True, blank=True)
    text = models.TextField(_("text"))
    token_count = models.PositiveIntegerField(_("tokens"), default=0)
    terms = models.TextField(_("keyword terms"), blank=True, editable=False)
    embedding = EmbeddingField(_("embedding"), null=True, blank=True, editable=False)
    embedder = models.CharField(_("embedder"), max_length=200, blank=True, editable=False)

    class Meta:
        ordering = ["attachment", "position"]
        verbose_name = _("attachment passage")
        verbose_name_plural = _("attachment passages")
        indexes = [models.Index(fields=["tenant", "conversation", "id"], name="memory_passage_conv")]

    def __str__(self) -> str:
        return self.text[:80]


class Feedback(TenantOwned):
    """A person's rating of one assistant reply (thumbs up +1, down -1) and an optional comment: one per message and
    rater; rating again replaces it."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="feedback", verbose_name=_("message"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("rated by")
    )
    rating = models.SmallIntegerField(_("rating"), choices=[(1, _("thumbs up")), (-1, _("thumbs down"))])
    comment = models.TextField(_("comment"), blank=True, max_length=2000)
    source = models.CharField(_("source"), max_length=10, choices=ConversationSource.choices)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("feedback")
        verbose_name_plural = _("feedback")
        constraints = [models.UniqueConstraint(fields=["message", "user"], name="memory_feedback_one_per_rater")]

    def __str__(self) -> str:
        return f"{'+1' if self.rating > 0 else '-1'} {self.message_id}"


class ConversationContext(TenantOwned):
    """What the model sees of a conversation: the frozen strategy, the summary and the active message ids."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, related_name="context", verbose_name=_("conversation")
    )
    strategy = models.CharField(
        _("strategy"),
        max_length=20,
        choices=[(value, label) for value, label, _help in STRATEGY_CHOICES],
        default=STRATEGY_NONE,
    )
    strategy_config = models.JSONField(
        _("strategy configuration"), default=dict, help_text=_("The agent's setting when the conversation started.")
    )
    summary = models.TextField(_("summary"), blank=True)
    active_messages = models.JSONField(_("active messages"), default=list)
    summarized_through = models.BigIntegerField(_("summarised through message"), null=True, blank=True)
    summary_pending = models.BooleanField(_("summary pending"), default=False)
    summary_queued_at = models.DateTimeField(_("summary queued"), null=True, blank=True)
    tool_context = models.JSONField(
        _("tool context"),
        default=dict,
        blank=True,
        help_text=_("What tools returned as context (A5); passed to later tools, never prompted."),
    )
    # Read with the row every turn: a conversation that never had a file costs its turns no query for files.
    attachments = models.PositiveIntegerField(
        _("files sent"), default=0, help_text=_("Files sent with the conversation's messages so far.")
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("conversation context")
        verbose_name_plural = _("conversation contexts")

    def __str__(self) -> str:
        return str(_("Context of %(conversation)s")) % {"conversation": self.conversation_id}


class OverflowMetric(TenantOwned):
    """Per agent and day: how often the overflow strategy acted, and what it saved (M4)."""

    agent_id = models.BigIntegerField(_("agent id"), db_index=True)
    day = models.DateField(_("day"))
    triggers = models.PositiveIntegerField(_("strategy triggers"), default=0)
    summaries_made = models.PositiveIntegerField(_("summaries made"), default=0)
    summaries_failed = models.PositiveIntegerField(_("summaries failed"), default=0)
    # A summary run again because the worker writing it was lost (the broker delivered it again), or because it stayed
    # pending so long that the next turn queued it again.
    summaries_retried = models.PositiveIntegerField(_("summaries retried"), default=0)
    tokens_saved = models.PositiveBigIntegerField(_("tokens saved"), default=0)

    class Meta:
        ordering = ["-day", "agent_id"]
        verbose_name = _("overflow metric")
        verbose_name_plural = _("overflow metrics")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "agent_id", "day"], name="memory_overflow_metric_unique_day")
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.day}"


# --- long-term memory (M5-M7): the event graph, the vector memory with strength, old turns ------------------------
#
# Every row below belongs to one tenant and one user, and to one memory key: "{agent}_{user}" for an agent's chats,
# seed 0's "{agent}_{user}_{conversation}" for a plan step's agent (P7). Reads filter by tenant (the manager), user
# and key: these are filters of the store query, never ranking features.


class EventActor(models.TextChoices):
    USER = "user", _("user")
    ASSISTANT = "assistant", _("assistant")
    SYSTEM = "system", _("system")


class EventStatus(models.TextChoices):
    PENDING = "pending", _("pending")
    COMPLETED = "completed", _("completed")
    FAILED = "failed", _("failed")


class RelationKind(models.TextChoices):
    CAUSES = "causes", _("causes")
    FOLLOWS = "follows", _("follows")
    REFERS_TO = "refers_to", _("refers to")
    RESOLVES = "resolves", _("resolves")


# The actions and entity types the extraction names (memory.longterm.events), in the reader's language; another
# value (a model's own word) is shown as it came.
ACTION_LABELS = {
    "query": _("question"),
    "answer": _("answer"),
    "report": _("report"),
    "clarify": _("clarification"),
    "decision": _("decision"),
    "execute_tool": _("tool call"),
    "plan": _("plan"),
    "other": _("other"),
}
ENTITY_TYPE_LABELS = {
    "ORG": _("organisation"),
    "PERSON": _("person"),
    "PLACE": _("place"),
    "PRODUCT": _("product"),
    "ORDER": _("order"),
    "DATE": _("date"),
    "OTHER": _("other"),
}


class Event(TenantOwned):
    """One event of a user's event graph (seed 2, section 3.2), with the seed's field names."""

    # Whose search collection a row belongs to (CollectionState's owner columns; kept by triggers on PostgreSQL).
    collection_owner: ClassVar[tuple[str, ...]] = ("user_id", "key")
    # The rows a search collection marks (field, value): the assistant's events, which weigh less when the user's
    # message speaks of the user (memory.longterm.events.walk.about_the_user).
    collection_marked: ClassVar[tuple[str, str]] = ("actor", EventActor.ASSISTANT.value)

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    key = models.CharField(_("memory key"), max_length=100, db_index=True)
    agent_id = models.BigIntegerField(_("agent id"), null=True, blank=True)
    event_id = models.CharField(_("event id"), max_length=60)
    timestamp = models.DateTimeField(_("time"))
    actor = models.CharField(_("actor"), max_length=12, choices=EventActor.choices, default=EventActor.USER)
    action_type = models.CharField(_("action"), max_length=40, default="query")
    content_summary = models.TextField(_("summary"))
    entities = models.JSONField(_("entities"), default=list, blank=True)
    status = models.CharField(_("status"), max_length=12, choices=EventStatus.choices, default=EventStatus.COMPLETED)
    related_event_ids = models.JSONField(_("related events"), default=list, blank=True)
    content_hash = models.CharField(_("content hash"), max_length=64)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("conversation")
    )
    # The stored messages the event was extracted from (the benchmark maps events back to turns through them).
    source_message_ids = models.JSONField(_("source messages"), default=list, blank=True)
    superseded_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="supersedes",
        verbose_name=_("superseded by"),
    )
    superseded_at = models.DateTimeField(_("superseded"), null=True, blank=True)
    terms = models.TextField(_("keyword terms"), blank=True, editable=False)
    embedding = EmbeddingField(_("embedding"), null=True, blank=True, editable=False)
    embedder = models.CharField(_("embedder"), max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["timestamp", "id"]
        verbose_name = _("memory event")
        verbose_name_plural = _("memory events")
        indexes = [
            models.Index(fields=["tenant", "user", "key", "id"], name="memory_event_owner"),
            # A question that names a time reads the owner's events said in it (memory.longterm.events.walk).
            models.Index(fields=["tenant", "user", "key", "timestamp"], name="memory_event_owner_time"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "event_id"], name="memory_event_unique_event_id"),
            models.UniqueConstraint(fields=["tenant", "user", "key", "content_hash"], name="memory_event_unique_hash"),
        ]

    def __str__(self) -> str:
        return f"{self.event_id}: {self.content_summary[:60]}"

    @property
    def action_label(self) -> str:
        """The action in the active language (ACTION_LABELS), or as the model wrote it."""
        label = ACTION_LABELS.get(self.action_type)
        return str(label) if label is not None else self.action_type

    @property
    def entity_chips(self) -> list[tuple[str, str]]:
        """The entities as (name, type in the active language) pairs; the type is empty when not given."""
        chips = []
        for entity in self.entities or []:
            if not isinstance(entity, dict) or not entity.get("name"):
                continue
            kind = str(entity.get("type") or "")
            chips.append((str(entity["name"]), str(ENTITY_TYPE_LABELS.get(kind.upper(), kind))))
        return chips


class EventRelation(TenantOwned):
    """A typed edge of the event graph: source -kind-> target (the typhoon causes the delay)."""

    source = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="out_relations", verbose_name=_("from"))
    target = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="in_relations", verbose_name=_("to"))
    kind = models.CharField(_("relation"), max_length=12, choices=RelationKind.choices)

    class Meta:
        verbose_name = _("event relation")
        verbose_name_plural = _("event relations")
        constraints = [
            models.UniqueConstraint(fields=["source", "target", "kind"], name="memory_relation_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} {self.kind} {self.target_id}"


class Entity(TenantOwned):
    """A named thing events mention, merged by normalised name and type within one memory key."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    key = models.CharField(_("memory key"), max_length=100)
    name = models.CharField(_("name"), max_length=200)
    normalized = models.CharField(_("normalised name"), max_length=200)
    type = models.CharField(_("type"), max_length=40, blank=True)
    events = models.ManyToManyField(Event, related_name="entity_rows", blank=True, verbose_name=_("events"))

    class Meta:
        ordering = ["name"]
        verbose_name = _("entity")
        verbose_name_plural = _("entities")
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user", "key", "normalized", "type"], name="memory_entity_unique_name"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})" if self.type else self.name


class MemoryItem(TenantOwned):
    """Seed 3's vector memory: a text with the time it was written or last recalled, and a strength level.

    Recalled after a long enough gap it rises a level (the gap doubles per level); past the cap it is long-term
    and fixed. Retrieved but not returned, or drawn by sleep, after its gap it sinks a level; at -1 it is deleted.
    """

    collection_owner: ClassVar[tuple[str, ...]] = ("user_id", "key")  # as Event's

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    key = models.CharField(_("memory key"), max_length=100, db_index=True)
    text = models.TextField(_("text"))
    text_hash = models.CharField(_("text hash"), max_length=64)
    time = models.DateTimeField(_("last written or recalled"))
    level = models.SmallIntegerField(_("level"), default=0)
    long_term = models.BooleanField(_("long-term"), default=False)
    recalls = models.PositiveIntegerField(_("times recalled"), default=0)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("conversation")
    )
    terms = models.TextField(_("keyword terms"), blank=True, editable=False)
    embedding = EmbeddingField(_("embedding"), null=True, blank=True, editable=False)
    embedder = models.CharField(_("embedder"), max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["-time", "-id"]
        verbose_name = _("vector memory")
        verbose_name_plural = _("vector memories")
        indexes = [models.Index(fields=["tenant", "user", "key", "id"], name="memory_item_owner")]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "key", "text_hash"], name="memory_item_unique_hash"),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class TurnMemory(TenantOwned):
    """One exchange (a user message and the reply) of a conversation, indexed so that turns the window dropped or
    the summary absorbed can be recalled (M7)."""

    collection_owner: ClassVar[tuple[str, ...]] = ("conversation_id",)  # as Event's

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    key = models.CharField(_("memory key"), max_length=100)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="turn_memories", verbose_name=_("conversation")
    )
    user_message_id = models.BigIntegerField(_("user message"))
    reply_message_id = models.BigIntegerField(_("reply"), null=True, blank=True)
    text = models.TextField(_("text"))
    terms = models.TextField(_("keyword terms"), blank=True, editable=False)
    embedding = EmbeddingField(_("embedding"), null=True, blank=True, editable=False)
    embedder = models.CharField(_("embedder"), max_length=200, blank=True, editable=False)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["conversation", "id"]
        verbose_name = _("indexed turn")
        verbose_name_plural = _("indexed turns")
        indexes = [models.Index(fields=["tenant", "conversation", "id"], name="memory_turn_conv")]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "user_message_id"], name="memory_turn_unique_message"),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class CollectionState(TenantOwned):
    """How many rows an owner's search collection has and its newest id (memory.longterm.store.collection), one row
    per model and owner, kept by triggers on the tables (PostgreSQL; migration 0019): reading it tells a process
    whether the collection it holds is current without counting the owner's rows (10,000 index entries, each with
    row-level security's check, at every recall). Owner columns a model does not have are 0 or "". SQLite counts
    the rows instead (no triggers there)."""

    label = models.CharField(_("model"), max_length=60)  # the model's label_lower: "memory.event"
    user_id = models.BigIntegerField(_("user id"), default=0)
    key = models.CharField(_("memory key"), max_length=100, default="", blank=True)
    conversation_id = models.BigIntegerField(_("conversation id"), default=0)
    row_count = models.BigIntegerField(_("rows"), default=0)
    newest_id = models.BigIntegerField(_("newest id"), default=0)

    class Meta:
        verbose_name = _("search collection state")
        verbose_name_plural = _("search collection states")
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "label", "user_id", "key", "conversation_id"], name="memory_collectionstate_owner"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} {self.user_id}/{self.key}/{self.conversation_id}: {self.row_count}"


class MemoryMetric(TenantOwned):
    """Per agent and day: what long-term memory did (extractions made, repaired, skipped; duplicates; dreams)."""

    agent_id = models.BigIntegerField(_("agent id"), db_index=True)
    day = models.DateField(_("day"))
    extractions = models.PositiveIntegerField(_("extractions"), default=0)
    events_added = models.PositiveIntegerField(_("events added"), default=0)
    repaired = models.PositiveIntegerField(_("repaired once"), default=0)
    skipped = models.PositiveIntegerField(_("skipped (invalid)"), default=0)
    duplicates = models.PositiveIntegerField(_("duplicates"), default=0)
    superseded = models.PositiveIntegerField(_("superseded"), default=0)
    dreams = models.PositiveIntegerField(_("dreams"), default=0)
    forgotten = models.PositiveIntegerField(_("forgotten"), default=0)

    class Meta:
        ordering = ["-day", "agent_id"]
        verbose_name = _("memory metric")
        verbose_name_plural = _("memory metrics")
        constraints = [models.UniqueConstraint(fields=["tenant", "agent_id", "day"], name="memory_metric_unique_day")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.day}"


class Dream(TenantOwned):
    """What sleep made of the memories it forgot (seed 3's S()): the dream and its fragments."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("user")
    )
    key = models.CharField(_("memory key"), max_length=100)
    text = models.TextField(_("dream"), blank=True)
    fragments = models.JSONField(_("forgotten fragments"), default=list)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("dream")
        verbose_name_plural = _("dreams")

    def __str__(self) -> str:
        return self.text[:80] or str(_("(no dream)"))
