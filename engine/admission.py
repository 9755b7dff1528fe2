"""The one admission of a turn. Every way in (the chat socket, the widget's socket, SSE, REST, `/v1`, `/mcp`) resolves
who is calling at its door, then calls `admit()`, which decides everything else once: which conversation the caller
may post into (or starts one), the message's length and characters, the visitor's rate, the tenant's API streams,
the budgets, tool results a conversation waits for, and then the turn itself (engine.turns: idempotency, busy,
overloaded). The answer is typed: `Admitted` (started, or a duplicate of a stored message) or a `Refusal` whose code,
HTTP status, retry hint and words come from one table; each door only maps it onto its protocol.

The rule for conversations (docs/security.md): anyone with the right may *read* a conversation (a tenant's
administrators read all, for audit), but only its own participant may *post* into it: the member it belongs to
(through the pages or any of their API keys), or the website visitor it belongs to. Everyone else, a plan step's
internal conversation, another tenant's id, and another agent's conversation all get the same "no such conversation
of this agent"."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from agents import frames
from agents.config import conversation_config, published_config
from agents.limits import MAX_MESSAGE_CHARS, MessageLimit, message_limit
from agents.models import Agent
from agents.runtime import Sink
from agents.services import conversation_start
from core import rates
from core.bounded import unstorable
from core.conf import setting
from core.db import database_sync_to_async
from engine import places, turns
from engine.turns import Outcome, Submission
from llm import quota
from llm.messages import ChatMessage
from llm.models import LLMCall
from llm.options import CallOptions
from memory.attachments import (
    AttachmentRefused,
    AttachmentRefusedCode,
    MessageFiles,
    Prepared,
    Upload,
    files_check,
    prepare,
    too_many_in_message,
)
from memory.models import Conversation, ConversationSource, Message, Role, Visitor
from memory.services import ToolResultsPending, messages_import, title_from
from tenants.access import may_administer
from tenants.generation import read_once
from tenants.models import Tenant
from tenants.scope import tenant_scope

MAX_CLIENT_ID_CHARS = 100


class RefusalCode(StrEnum):
    """Why a message was not taken: the `code` of the error every door answers (the socket's error frame, the
    HTTP error object, the MCP tool error)."""

    CONVERSATION_NOT_FOUND = "conversation_not_found"
    EMPTY_MESSAGE = "empty_message"
    MESSAGE_TOO_LONG = "message_too_long"
    INVALID_CHARACTERS = "invalid_characters"
    INVALID_CLIENT_ID = "invalid_client_id"
    RATE_LIMITED = "rate_limited"
    USER_RATE_LIMITED = "user_rate_limited"
    NEW_VISITORS_LIMITED = "new_visitors_limited"
    TOO_MANY_STREAMS = "too_many_streams"
    QUOTA_EXCEEDED = "quota_exceeded"
    DAILY_BUDGET_EXCEEDED = "daily_budget_exceeded"
    TOOL_RESULTS_PENDING = "tool_results_pending"
    BUSY = "conversation_busy"
    OVERLOADED = "overloaded"
    ATTACHMENT_NOT_FOUND = "attachment_not_found"
    ATTACHMENT_REFUSED = "attachment_refused"
    TOO_MANY_ATTACHMENTS = "too_many_attachments"
    ATTACHMENTS_NOT_ALLOWED = "attachments_not_allowed"


@dataclass(frozen=True)
class _Kind:
    status: int
    words: str  # an English msgid, translated when a refusal's message is read (in the door's language)


# One row per refusal: its HTTP status and its words (%(…)s filled from the refusal's params).
REFUSALS: dict[RefusalCode, _Kind] = {
    RefusalCode.CONVERSATION_NOT_FOUND: _Kind(404, gettext_noop("No such conversation of this agent.")),
    RefusalCode.EMPTY_MESSAGE: _Kind(400, gettext_noop("The message is empty. Write something first.")),
    RefusalCode.MESSAGE_TOO_LONG: _Kind(400, "%(explanation)s"),
    RefusalCode.INVALID_CHARACTERS: _Kind(
        400,
        gettext_noop("The message contains a NUL character or a lone surrogate, which cannot be stored: remove it."),
    ),
    RefusalCode.INVALID_CLIENT_ID: _Kind(
        400, gettext_noop("The message's id (client_id) must be a non-empty string of at most %(max)s characters.")
    ),
    RefusalCode.RATE_LIMITED: _Kind(
        429, gettext_noop("Message limit reached (%(count)s per hour). Please try again in %(seconds)s s.")
    ),
    RefusalCode.USER_RATE_LIMITED: _Kind(
        429, gettext_noop("You sent %(count)s messages in a minute, the most allowed. Send again in %(seconds)s s.")
    ),
    RefusalCode.NEW_VISITORS_LIMITED: _Kind(
        429, gettext_noop("Too many new conversations from here. Please try again in %(seconds)s s.")
    ),
    RefusalCode.TOO_MANY_STREAMS: _Kind(
        429,
        gettext_noop(
            "This tenant already has %(count)s replies streaming through the API, its limit. Retry in %(seconds)s s."
        ),
    ),
    RefusalCode.QUOTA_EXCEEDED: _Kind(
        429,
        gettext_noop(
            "This tenant's monthly token budget is used up, so the message was not sent. "
            "Ask the platform operator to raise it."
        ),
    ),
    RefusalCode.DAILY_BUDGET_EXCEEDED: _Kind(
        429, gettext_noop("This assistant has answered all it can today. Please come back tomorrow.")
    ),
    RefusalCode.TOOL_RESULTS_PENDING: _Kind(
        409,
        gettext_noop(
            "This conversation waits for the results of your tools: send them with the whole history, without the "
            "conversation id."
        ),
    ),
    RefusalCode.BUSY: _Kind(
        409,
        gettext_noop(
            "The agent is still answering in this conversation. Wait for the reply or stop it, then send again."
        ),
    ),
    RefusalCode.OVERLOADED: _Kind(
        503, gettext_noop("The platform is busy and did not take the message. Retry in %(seconds)s s.")
    ),
    RefusalCode.ATTACHMENT_NOT_FOUND: _Kind(404, gettext_noop("No such file: upload it again, then send the message.")),
    # The file's own words (memory.attachments.AttachmentRefused: what is wrong with it and what to do).
    RefusalCode.ATTACHMENT_REFUSED: _Kind(400, "%(reason)s"),
    RefusalCode.TOO_MANY_ATTACHMENTS: _Kind(400, "%(reason)s"),
    RefusalCode.ATTACHMENTS_NOT_ALLOWED: _Kind(
        403, gettext_noop("Files cannot be sent in this chat. Write your message as text.")
    ),
}


@dataclass(frozen=True)
class Refusal:
    """A message not taken: nothing was stored. `message` is read in the active language (the door's)."""

    code: RefusalCode
    params: dict[str, Any] = field(default_factory=dict)
    retry_after: int | None = None

    @property
    def status(self) -> int:
        return REFUSALS[self.code].status

    @property
    def message(self) -> str:
        """The words, in the active language."""
        return _(REFUSALS[self.code].words) % self.params


class CallerKind(StrEnum):
    """How a caller came in: the pages (a session), an API key, or a website visitor (an embed token)."""

    MEMBER = "member"
    KEY = "key"
    VISITOR = "visitor"
    # An evaluation run (evals) posting a case's turns into its own conversation: held to the tenant's budget, not to
    # a member's messages per minute (a run sends many at once, bounded by its concurrency).
    EVAL = "eval"


@dataclass(frozen=True)
class VisitorPass:
    """A website visitor as the widget's door knows them: the embed they came through (its agent and limits), a hash
    of the id their browser keeps, and a hash of their address (for the new-visitor rate)."""

    embed_id: int
    agent_id: int
    id_hash: str
    # Names the embed in the shared cache's counters and the budget ledger: a hash of its token (ids repeat when a
    # database is recreated; tokens do not).
    embed_key: str = ""
    address_hash: str = ""
    messages_per_hour: int = 0
    daily_token_budget: int = 0
    # The embed lets its visitors send files (widget.EmbedToken's setting).
    attachments_allowed: bool = False


@dataclass(frozen=True)
class Caller:
    """Who starts a turn, resolved once at the door: a member on the pages, an API key acting as its member (limited
    to `agent_ids` when the key chose some), or a website visitor (`visitor`)."""

    tenant: Tenant
    source: ConversationSource
    kind: CallerKind = CallerKind.MEMBER
    user: Any = None
    membership: Any = None
    agent_ids: frozenset[int] = frozenset()
    visitor: VisitorPass | None = None

    @property
    def counts_streams(self) -> bool:
        """A key's streamed reply takes one of the tenant's API_TENANT_MAX_STREAMS places (the pages' own do not)."""
        return self.kind == CallerKind.KEY

    def reaches(self, agent_id: int) -> bool:
        return not self.agent_ids or agent_id in self.agent_ids


@dataclass(frozen=True)
class Target:
    """Where the message goes: the conversation `conversation_id` (or `conversation`, already read by the door), or
    with neither a new conversation of `agent` (`latest`: the caller's latest one of the agent if there is one).
    `history`: messages stored first in a new conversation (a stateless API request's)."""

    agent: Agent | None = None
    conversation_id: int | None = None
    conversation: Conversation | None = None
    latest: bool = False
    history: Sequence[ChatMessage] = ()
    # The conversation's message limit as an earlier admission worked it out (Admitted.limit): a socket keeps it
    # between messages (not for a test conversation, whose draft may change meanwhile).
    limit: MessageLimit | None = None


@dataclass
class Admitted:
    """A message taken: its turn started, or it was stored before (duplicate: nothing runs again)."""

    conversation: Conversation
    submission: Submission
    slot: places.StreamSlot | None = None
    created: bool = False
    limit: MessageLimit | None = None

    @property
    def outcome(self) -> Outcome:
        return self.submission.outcome


def visitor_hash(visitor_id: str) -> str:
    """What is kept of a visitor's id: a hash of it (the id stays in the visitor's browser)."""
    return hashlib.sha256(visitor_id.encode()).hexdigest()[:40]


# --- the checks ----------------------------------------------------------------------------------------------------


def check_message(content: Any, client_id: Any, *, files: int = 0) -> Refusal | None:
    """The message's own checks, before any database work. With `files` (how many it carries) its text may be
    empty."""
    if not isinstance(client_id, str) or not client_id.strip() or len(client_id) > MAX_CLIENT_ID_CHARS:
        return Refusal(RefusalCode.INVALID_CLIENT_ID, {"max": MAX_CLIENT_ID_CHARS})
    if unstorable(client_id) or (isinstance(content, str) and unstorable(content)):
        return Refusal(RefusalCode.INVALID_CHARACTERS)
    if not isinstance(content, str) or (not content.strip() and not files):
        return Refusal(RefusalCode.EMPTY_MESSAGE)
    if len(content) > MAX_MESSAGE_CHARS:
        return _too_long(None)
    return None


def _too_long(explanation: str | None) -> Refusal:
    """Too long: `explanation` is the agent's limit's words (agents.limits), None for the platform's limit."""
    if explanation is None:
        explanation = MessageLimit(chars=MAX_MESSAGE_CHARS).explanation()
    return Refusal(RefusalCode.MESSAGE_TOO_LONG, {"explanation": explanation})


def may_post(caller: Caller, conversation: Conversation) -> bool:
    """The one rule: only the conversation's own participant posts into it (see the module's docstring)."""
    if conversation.tenant_id != caller.tenant.pk or conversation.parent_id is not None:
        return False
    if caller.visitor is not None:
        visitor = conversation.visitor
        return (
            visitor is not None
            and visitor.embed_id == caller.visitor.embed_id
            and visitor.id_hash == caller.visitor.id_hash
            and conversation.agent_id == caller.visitor.agent_id
        )
    if caller.user is None or conversation.user_id != caller.user.pk or conversation.visitor_id is not None:
        return False
    if conversation.is_test and not may_administer(user=caller.user, membership=caller.membership):
        return False
    return caller.reaches(conversation.agent_id) and conversation.agent.active


def _conversation(caller: Caller, target: Target) -> Conversation | None:
    """The existing conversation the message goes to, if the caller may post into it; None: refused."""
    conversation = target.conversation
    if conversation is None:
        conversation = (
            Conversation.objects.select_related("agent", "version", "provider", "tenant", "context", "user", "visitor")
            .filter(pk=target.conversation_id)
            .first()
        )
    if conversation is None or not may_post(caller, conversation):
        return None
    if target.agent is not None and conversation.agent_id != target.agent.pk:
        return None
    return conversation


def _latest(caller: Caller, agent: Agent) -> Conversation | None:
    """The caller's latest conversation of `agent` from this door (the widget continues it)."""
    conversations = Conversation.objects.select_related(
        "agent", "version", "provider", "tenant", "context", "user", "visitor"
    ).filter(agent=agent, source=caller.source, parent__isnull=True, is_test=False)
    if caller.visitor is not None:
        conversations = conversations.filter(
            visitor__embed_id=caller.visitor.embed_id, visitor__id_hash=caller.visitor.id_hash
        )
    else:
        conversations = conversations.filter(user_id=caller.user.pk, visitor__isnull=True)
    return conversations.order_by("-id").first()


def _day_start() -> dt.datetime:
    return timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)


def embed_tokens_today(embed_id: int) -> int:
    """Tokens (prompt + completion) of today's model calls in the conversations of an embed's visitors, summed in
    SQL (UTC day)."""
    conversations = Conversation.objects.filter(visitor__embed_id=embed_id).values("pk")
    total = LLMCall.objects.filter(conversation_id__in=conversations, created_at__gte=_day_start()).aggregate(
        total=Sum("total_tokens")
    )["total"]
    return int(total or 0)


def _visitor_limits(visitor: VisitorPass, existing: Conversation | None) -> Refusal | None:
    if visitor.messages_per_hour and existing is not None:
        sent = Message.objects.filter(
            conversation__visitor_id=existing.visitor_id,
            role=Role.USER,
            created_at__gte=timezone.now() - dt.timedelta(hours=1),
        ).count()
        if sent >= visitor.messages_per_hour:
            return Refusal(RefusalCode.RATE_LIMITED, {"count": visitor.messages_per_hour, "seconds": 3600}, 3600)
    budget = quota.Budget(
        key=_embed_budget_key(visitor),
        limit=visitor.daily_token_budget,
        used=lambda: embed_tokens_today(visitor.embed_id),
    )
    if quota.budget_spent(budget):
        return Refusal(RefusalCode.DAILY_BUDGET_EXCEEDED)
    return None


def _embed_budget_key(visitor: VisitorPass) -> tuple:
    return ("embed", visitor.embed_key or visitor.embed_id, _day_start().date().isoformat())


def _count_visitor_tokens(visitor: VisitorPass, task: Any) -> None:
    """A visitor's turn ended: its tokens count against the embed's daily budget in this process's ledger at once
    (the SQL sum is read again after LLM_QUOTA_CACHE_SECONDS)."""
    if task.cancelled() or task.exception() is not None or task.result() is None:
        return
    usage = task.result().usage
    quota.budget_ledger_add(_embed_budget_key(visitor), usage.prompt_tokens + usage.completion_tokens)


def _member_rate(caller: Caller) -> Refusal | None:
    """A member's messages per minute on the pages (the chat socket, the REST API with the session)."""
    limit = setting("CHAT_USER_MESSAGES_PER_MINUTE")
    # The account's join time tells apart two users that had the same id (a database recreated, as tests do).
    joined = int(caller.user.date_joined.timestamp()) if getattr(caller.user, "date_joined", None) else 0
    wait = rates.fixed_window(f"member-messages:{caller.user.pk}:{joined}", limit, 60)
    if wait is None:
        return None
    return Refusal(RefusalCode.USER_RATE_LIMITED, {"count": limit, "seconds": wait}, wait)


def _new_visitor_allowed(visitor: VisitorPass) -> Refusal | None:
    """New visitors per address and per embed token (a visitor that rotates its id is a new visitor each time)."""
    for name, limit in (
        (f"visitor-new:{visitor.embed_key}:{visitor.address_hash}", setting("WIDGET_NEW_VISITORS_PER_ADDRESS")),
        (f"visitor-new:{visitor.embed_key}", setting("WIDGET_NEW_VISITORS_PER_TOKEN")),
    ):
        wait = rates.fixed_window(name, limit, 3600)
        if wait is not None:
            return Refusal(RefusalCode.NEW_VISITORS_LIMITED, {"seconds": wait}, wait)
    return None


def _message_limit(conversation: Conversation | None, agent: Agent, known: MessageLimit | None) -> MessageLimit:
    """The agent's own message limit (its model's window): the conversation's, or a new one's (the published
    version)."""
    if known is not None and conversation is not None and not conversation.is_test:
        return known
    if conversation is not None:
        return message_limit(conversation_config(conversation))
    return message_limit(published_config(agent).config)


# --- starting a conversation ------------------------------------------------------------------------------------


def _visitor_known(visitor: VisitorPass) -> Visitor | None:
    """The visitor's row, if their first message or first upload made it."""
    return Visitor.objects.select_related("user").filter(embed_id=visitor.embed_id, id_hash=visitor.id_hash).first()


def _visitor_row(caller: Caller) -> Visitor:
    """The visitor's row and account, made with their first message or upload (never on a page load)."""
    visitor = caller.visitor
    assert visitor is not None
    found = _visitor_known(visitor)
    if found is not None:
        return found
    try:
        with transaction.atomic():
            user, made = get_user_model().objects.get_or_create(
                username=f"visitor-{visitor.embed_id}-{visitor.id_hash}"[:150], defaults={"is_active": False}
            )
            if made:
                user.set_unusable_password()
                user.save(update_fields=["password"])
            return Visitor.objects.create(
                tenant=caller.tenant, embed_id=visitor.embed_id, id_hash=visitor.id_hash, user=user
            )
    except IntegrityError:  # the same visitor's first message from two tabs at once
        return Visitor.objects.select_related("user").get(embed_id=visitor.embed_id, id_hash=visitor.id_hash)


def visitor_account(caller: Caller) -> Any | Refusal:
    """A website visitor's own account (made now if this is their first upload or message): what their uploads
    are stored under (memory.attachments.attachment_upload's `user`). Making one makes a new visitor, so it obeys the
    new-visitor rate a first message obeys: a Refusal (NEW_VISITORS_LIMITED) then, and nothing is made."""
    assert caller.visitor is not None
    known = _visitor_known(caller.visitor)
    if known is not None:
        return known.user
    refusal = _new_visitor_allowed(caller.visitor)
    if refusal is not None:
        return refusal
    return _visitor_row(caller).user


def _start(caller: Caller, target: Target, content: str) -> Conversation:
    """A new conversation of the target's agent for the caller, from its door (`source`), with the target's history."""
    agent = target.agent
    assert agent is not None
    with transaction.atomic():  # the conversation and its history are stored whole or not at all
        if caller.visitor is not None:
            visitor = _visitor_row(caller)
            conversation = conversation_start(agent=agent, user=visitor.user, source=caller.source, visitor=visitor)
        else:
            conversation = conversation_start(
                agent=agent, user=caller.user, title=title_from(content), source=caller.source
            )
        if target.history:
            messages_import(conversation=conversation, messages=target.history)
    return conversation


# --- the decision -------------------------------------------------------------------------------------------------


@dataclass
class _Place:
    conversation: Conversation
    slot: places.StreamSlot | None
    created: bool
    limit: MessageLimit
    files: MessageFiles | None = None
    # A new conversation's message, stored in the hop that made the conversation (turns.store_new).
    stored: turns.Stored | None = None


@dataclass(frozen=True)
class _FilesAsked:
    """A message's files as the door gave them: ids of stored files, and files sent inline, already read."""

    ids: Sequence[int] = ()
    prepared: Sequence[Prepared] = ()


def _file_refusal(refused: AttachmentRefused) -> Refusal:
    """A file's refusal as the admission's: its own words, under the code the doors know."""
    if refused.code == AttachmentRefusedCode.NOT_FOUND:
        return Refusal(RefusalCode.ATTACHMENT_NOT_FOUND)
    if refused.code == AttachmentRefusedCode.NOT_ALLOWED:
        return Refusal(RefusalCode.ATTACHMENTS_NOT_ALLOWED)
    if refused.code in (AttachmentRefusedCode.TOO_MANY_IN_MESSAGE, AttachmentRefusedCode.TOO_MANY_IN_CONVERSATION):
        return Refusal(RefusalCode.TOO_MANY_ATTACHMENTS, {"reason": refused.message, **refused.params})
    where = {key: refused.params[key] for key in ("upload", "name") if key in refused.params}
    return Refusal(RefusalCode.ATTACHMENT_REFUSED, {"reason": refused.message, "file_code": str(refused.code), **where})


def _files_owner(caller: Caller, conversation: Conversation | None) -> int | None:
    """The account whose uploads the caller may send: the member's, or the visitor's own (made with their first
    message or their first upload, engine.admission.visitor_account)."""
    if caller.visitor is None:
        return caller.user.pk if caller.user is not None else None
    if conversation is not None:
        return conversation.user_id
    return (
        Visitor.objects.filter(embed_id=caller.visitor.embed_id, id_hash=caller.visitor.id_hash)
        .values_list("user_id", flat=True)
        .first()
    )


def _files(caller: Caller, conversation: Conversation | None, asked: _FilesAsked) -> Refusal | MessageFiles:
    """The message's files checked against the caller and the conversation (memory.attachments.files_check)."""
    try:
        rows = files_check(
            ids=asked.ids,
            uploads=len(asked.prepared),
            owner_id=_files_owner(caller, conversation),
            conversation=conversation,
        )
    except AttachmentRefused as refused:
        return _file_refusal(refused)
    return MessageFiles(rows=rows, prepared=list(asked.prepared))


def _limits(caller: Caller, conversation: Conversation | None, limit: MessageLimit, content: str) -> Refusal | None:
    """The checks of a message once its conversation (or, for a new one, its agent) is known."""
    too_long = limit.refusal(content)
    refusal = _too_long(too_long) if too_long else None
    # A conversation waiting for an API client's tool results is refused by the message's own insert
    # (turns.submit_user_message's unless_awaiting_tools): reading it here cost every turn a statement.
    if refusal is None and caller.visitor is not None:
        refusal = _visitor_limits(caller.visitor, conversation)
    if refusal is None and caller.kind == CallerKind.MEMBER:  # a key's rate is API_KEY_RATE, per request
        refusal = _member_rate(caller)
    if refusal is None and quota.quota_spent(tenant=caller.tenant):
        refusal = Refusal(RefusalCode.QUOTA_EXCEEDED)
    # A new visitor is counted once: by their first message, or by their first upload if that came first.
    if refusal is None and conversation is None and caller.visitor is not None and not _visitor_known(caller.visitor):
        refusal = _new_visitor_allowed(caller.visitor)
    return refusal


def _checks(
    caller: Caller, conversation: Conversation | None, limit: MessageLimit, content: str, asked: _FilesAsked | None
) -> tuple[Refusal | None, MessageFiles | None]:
    """The limits, then the files (only when the message carries some: a message without files costs nothing more)."""
    refusal = _limits(caller, conversation, limit, content)
    if refusal is not None or asked is None:
        return refusal, None
    checked = _files(caller, conversation, asked)
    return (checked, None) if isinstance(checked, Refusal) else (None, checked)


def _decide(
    caller: Caller,
    target: Target,
    content: str,
    client_id: str,
    stream: bool,
    asked: _FilesAsked | None = None,
    then: Sequence[ChatMessage] = (),
    cleared: bool = False,
) -> Refusal | _Place:
    """Everything admit() decides from the database, in one hop to the database thread; a new conversation's message
    (and `then`) is stored in the same hop, once the conversation is made, and so is an existing one's when the
    frame log found it free just before (`cleared`: turns.clear_to_store)."""
    with read_once(), tenant_scope(caller.tenant):
        conversation = None
        if target.conversation is not None or target.conversation_id is not None:
            conversation = _conversation(caller, target)
            if conversation is None:
                return Refusal(RefusalCode.CONVERSATION_NOT_FOUND)
        elif target.latest and target.agent is not None:
            conversation = _latest(caller, target.agent)
        agent = conversation.agent if conversation is not None else target.agent
        if agent is None:
            return Refusal(RefusalCode.CONVERSATION_NOT_FOUND)
        limit = _message_limit(conversation, agent, target.limit)
        refusal, files = _checks(caller, conversation, limit, content, asked)
        if refusal is not None:
            # A resend of a stored message is answered as its duplicate (its reply, not a refusal), whatever the limits.
            resent = (
                conversation is not None
                and Message.objects.filter(conversation=conversation, client_id=client_id).exists()
            )
            if not resent:
                return refusal
        slot = None
        streams = setting("API_TENANT_MAX_STREAMS")
        if stream and caller.counts_streams and streams:
            slot = places.stream_slot_take(caller.tenant.pk, streams)
            if slot is None:
                seconds = places.STREAM_RETRY_SECONDS
                return Refusal(RefusalCode.TOO_MANY_STREAMS, {"count": streams, "seconds": seconds}, seconds)
        with _slot_given_back(slot):
            if conversation is not None:
                place = _Place(_with_tenant(conversation, caller.tenant), slot, created=False, limit=limit, files=files)
                if not cleared:
                    return place
            else:
                started = _with_tenant(_start(caller, target, content), caller.tenant)
                place = _Place(started, slot, created=True, limit=limit, files=files)
            return _with_message(place, client_id, content, then)


@contextlib.contextmanager
def _slot_given_back(slot: places.StreamSlot | None) -> Iterator[None]:
    """The stream slot is released when what follows fails (the message is not taken)."""
    try:
        yield
    except BaseException:
        if slot is not None:
            slot.release()
        raise


def _with_message(place: _Place, client_id: str, content: str, then: Sequence[ChatMessage]) -> _Place:
    """The place with its message stored (turns.store_new) in admission's hop; a message with files is stored by
    the turn's own hop (a refusal there stores no file). An existing conversation waiting for an API client's tool
    results raises ToolResultsPending (nothing stored)."""
    if not place.files:
        place.stored = turns.store_new(
            place.conversation, client_id, content, then, unless_awaiting_tools=not place.created
        )
    return place


def _with_tenant(conversation: Conversation, tenant: Tenant) -> Conversation:
    """The conversation with its tenant set from the caller's (the turn reads it: not a statement of its own)."""
    if conversation.tenant_id == tenant.pk and not Conversation.tenant.is_cached(conversation):
        conversation.tenant = tenant
    return conversation


def _forget(conversation: Conversation) -> None:
    """A conversation made for a message the turn gate then refused: nothing of it stays, nor of a visitor it made
    (their account goes, and their row with it)."""
    with tenant_scope(conversation.tenant), transaction.atomic():
        Conversation.objects.filter(pk=conversation.pk).delete()
        visitor = conversation.visitor_id
        if visitor is not None and not Conversation.objects.filter(visitor_id=visitor).exists():
            get_user_model().objects.filter(pk=conversation.user_id, is_active=False).delete()


# What the turn engine refused after admission's checks (nothing stored), as admission's refusal.
_REFUSED_OUTCOMES: dict[Outcome, Callable[[], Refusal]] = {
    Outcome.BUSY: lambda: Refusal(RefusalCode.BUSY),
    Outcome.OVERLOADED: lambda: _overloaded(),
    Outcome.TOOL_RESULTS_PENDING: lambda: Refusal(RefusalCode.TOOL_RESULTS_PENDING),
}


async def admit(
    *,
    caller: Caller,
    target: Target,
    content: Any,
    client_id: Any,
    stream: bool = False,
    then: Sequence[ChatMessage] = (),
    options: CallOptions | None = None,
    also: Sink | None = None,
    attachments: Sequence[int] = (),
    uploads: Sequence[Upload] = (),
) -> Admitted | Refusal:
    """Take a message and start its turn, or refuse it with nothing stored (module docstring). `stream`: the door
    streams the reply (a key's stream takes one of the tenant's places, released by the door when it ends); `then`,
    `options`, `also`: engine.turns.submit_user_message's. `attachments`: ids of files the caller uploaded (not yet
    sent, or sent before in this conversation); `uploads`: files sent with the message itself, read (parsed, OCR)
    in a worker thread before the database hop and stored with the message."""
    refusal = check_message(content, client_id, files=len(attachments) + len(uploads))
    if refusal is not None:
        return refusal
    asked = await _files_asked(caller, attachments, uploads) if attachments or uploads else None
    if isinstance(asked, Refusal):
        return asked
    new = target.conversation is None and target.conversation_id is None and not target.latest
    if new and not turns.turn_gate().has_room():
        return _overloaded()
    # A message to a known conversation that no turn holds is stored in the hop that checks it (one hop, not two).
    known = target.conversation.pk if target.conversation is not None else target.conversation_id
    cleared = known is not None and asked is None and await turns.clear_to_store(known)
    try:
        place = await database_sync_to_async(_decide)(caller, target, content, client_id, stream, asked, then, cleared)
    except ToolResultsPending:
        return Refusal(RefusalCode.TOOL_RESULTS_PENDING)
    if isinstance(place, Refusal):
        return place
    files = _turn_files(caller, place)
    try:
        with tenant_scope(caller.tenant):
            submission = await turns.submit_user_message(
                conversation=place.conversation,
                client_id=client_id,
                content=content,
                also=also,
                then=then,
                options=options,
                files=files,
                unless_awaiting_tools=not place.created,
                fresh=place.created,
                cleared=cleared,
                stored=place.stored,
            )
    except BaseException:
        if place.slot is not None:
            await place.slot.arelease()
        raise
    refused = _REFUSED_OUTCOMES.get(submission.outcome)
    if refused is not None:
        if place.slot is not None:
            await place.slot.arelease()
        if place.created:
            await database_sync_to_async(_forget)(place.conversation)
        return refused()
    if caller.visitor is not None and submission.task is not None:
        submission.task.add_done_callback(partial(_count_visitor_tokens, caller.visitor))
    return Admitted(
        conversation=place.conversation,
        submission=submission,
        slot=place.slot,
        created=place.created,
        limit=place.limit,
    )


async def _files_asked(caller: Caller, ids: Sequence[int], uploads: Sequence[Upload]) -> Refusal | _FilesAsked:
    """A message's files checked before the database: the embed allows them, not too many, the ids are ids, and
    the uploads read (CPU: parsing, OCR, embedding a large document) in a worker thread, off the event loop."""
    if caller.visitor is not None and not caller.visitor.attachments_allowed:
        return Refusal(RefusalCode.ATTACHMENTS_NOT_ALLOWED)
    if len(ids) + len(uploads) > setting("ATTACHMENTS_PER_MESSAGE"):
        return _file_refusal(too_many_in_message())
    if not all(isinstance(pk, int) and not isinstance(pk, bool) and pk > 0 for pk in ids):
        return Refusal(RefusalCode.ATTACHMENT_NOT_FOUND)
    try:
        prepared = await asyncio.to_thread(_prepare_all, list(uploads))
    except AttachmentRefused as refused:
        return _file_refusal(refused)
    return _FilesAsked(ids=list(ids), prepared=prepared)


def _turn_files(caller: Caller, place: _Place) -> turns.Files | None:
    """The checked files for the turn, with the account they are stored under (a visitor's own)."""
    if not place.files:
        return None
    owner = caller.user.pk if caller.visitor is None else place.conversation.user_id
    return turns.Files(place.files, user_id=owner)


def _prepare_all(uploads: list[Upload]) -> list[Prepared]:
    """Each upload read in order; a refused one says which it was (its index: /v1 names its content part)."""
    prepared = []
    for index, upload in enumerate(uploads):
        try:
            prepared.append(prepare(upload))
        except AttachmentRefused as refused:
            refused.params.setdefault("upload", index)
            refused.params.setdefault("name", upload.name)
            raise
    return prepared


def _overloaded() -> Refusal:
    seconds = setting("CHAT_BUSY_RETRY_SECONDS")
    return Refusal(RefusalCode.OVERLOADED, {"seconds": seconds}, seconds)


def answer_frames(admitted: Admitted, client_id: str) -> list[frames.Logged]:
    """The frames that answer a taken message before its live ones: a started turn's echo; for a resent one, its
    turn's logged frames, or (the log no longer has them) its stored message and reply, marked duplicate."""
    submission = admitted.submission
    logged = list(submission.frames)
    if submission.outcome == Outcome.STARTED or any(frames.ends_turn(entry.frame) for entry in logged):
        return logged
    if logged and submission.reply is None:
        return logged  # its turn still runs: its live frames follow
    message, reply = submission.message, submission.reply
    echo = frames.UserMessage(message_id=message.pk, client_id=client_id, content=message.content, duplicate=True)
    answer = logged[:1] or [frames.Logged(None, echo)]
    if reply is not None:
        usage = reply.usage or {}
        done = frames.Done(
            message_id=reply.pk,
            status=reply.status,
            usage=frames.usage_dict(usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)),
            content=reply.content,
            duplicate=True,
        )
        answer.append(frames.Logged(None, done))
    return answer
