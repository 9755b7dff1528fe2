"""Writes of conversation memory: start a conversation, store messages, build the context of a turn, queue the
work after a turn (memory.tasks; the summary itself is memory.summaries, the counters memory.counters).

Memory sits below agents and never imports them: `conversation_create` is given what a conversation keeps (the
version, the model, the overflow strategy), resolved by agents.services.conversation_start.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from celery import current_app
from django.db import IntegrityError, NotSupportedError, connections, transaction
from django.db.models import Case, F, Func, JSONField, Value, When
from django.db.models.sql import InsertQuery
from django.utils import timezone

from core import tracing
from core.background import BackgroundLine
from core.conf import setting
from llm.messages import ChatMessage
from llm.models import ModelProvider
from memory import overflow
from memory.attachments import (
    FilesInTurn,
    MessageFiles,
    conversation_files,
    files_for_turn,
    files_for_window,
    files_store,
    message_files_tokens,
)
from memory.counters import overflow_metric_add
from memory.models import (
    Attachment,
    Conversation,
    ConversationContext,
    ConversationSource,
    Message,
    MessageStatus,
    Role,
    Visitor,
)
from memory.stored import active_stored
from memory.tasks import extract_turn_memory, summarize_conversation
from tenants.managers import ensure_scope_allows

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser


# A summary still pending after this long is taken as lost (a worker died, the broker dropped it): queue another.
# Longer than the task's retries with their backoff take.
SUMMARY_PENDING_TIMEOUT = dt.timedelta(minutes=15)


class IdsAppended(Func):
    """A JSON list column with `ids` appended, computed by the UPDATE itself: no read first and no row lock held
    between a read and a write (the UPDATE's own row lock orders concurrent appends)."""

    output_field = JSONField()

    def __init__(self, column: str, ids: Sequence[int]) -> None:
        super().__init__(F(column))
        self.ids = [int(pk) for pk in ids]

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        values = ", ".join(["%s"] * len(self.ids))
        return f"(COALESCE({column}, '[]'::jsonb) || jsonb_build_array({values}))", [*params, *self.ids]

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        paths = ", ".join(["'$[#]', %s"] * len(self.ids))
        return f"json_insert(COALESCE({column}, '[]'), {paths})", [*params, *self.ids]

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        raise NotSupportedError(f"JSON list appends are written for PostgreSQL and SQLite, not {connection.vendor}")


def context_ids_append(conversation: Conversation, ids: Sequence[int]) -> None:
    """Make the messages `ids` active in the conversation's context, after those already there (one statement)."""
    ConversationContext.objects.filter(conversation=conversation).update(
        active_messages=IdsAppended("active_messages", ids), updated_at=timezone.now()
    )


@dataclass(frozen=True)
class BuiltContext:
    """The request of one turn: the chat messages (one system message first), the strategy's window, and what of
    the conversation's files went with it (sent with their messages; passages of large documents)."""

    messages: list[ChatMessage]
    window: overflow.Window
    files: FilesInTurn = field(default_factory=FilesInTurn)


@transaction.atomic
def conversation_create(
    *,
    agent: Any,
    version: Any,
    user: AbstractBaseUser,
    provider: ModelProvider | None,
    model: str,
    overflow_config: overflow.OverflowConfig,
    title: str = "",
    parent: Conversation | None = None,
    is_test: bool = False,
    source: str = ConversationSource.CHAT,
    visitor: Visitor | None = None,
) -> Conversation:
    """Store a conversation with what it keeps for its lifetime: the agent version it started on, its model (whose
        tokenizer counts it) and its overflow strategy (seed 4, 7.2). Agents resolve these (agents.services). `is_test`
        marks an administrator's test of the agent's draft (no version); `source` and `visitor` say where it was started
    (memory.models.ConversationSource) and, for a website widget, by which visitor."""
    conversation = Conversation(
        tenant_id=agent.tenant_id,
        agent=agent,
        version=version,
        user=user,
        provider=provider,
        model=model,
        title=title,
        parent=parent,
        is_test=is_test,
        source=source,
        visitor=visitor,
    )
    context = ConversationContext(
        tenant_id=agent.tenant_id,
        conversation=conversation,
        strategy=overflow_config.strategy,
        strategy_config=overflow_config.to_dict(),
    )
    one_statement = connections[Conversation.objects.db].vendor == "postgresql"
    if not (one_statement and _create_in_one_statement(conversation, context)):
        # Two statements (the caller's transaction keeps them together).
        conversation.save(force_insert=True)
        context.conversation = conversation
        context.save(force_insert=True)
    return conversation


def _create_in_one_statement(conversation: Conversation, context: ConversationContext) -> bool:
    """The conversation and its context inserted by one data-modifying WITH (the inserts Django compiles, with their
    defaults and adapters; the context's conversation is the first insert's RETURNING id). The rows' tenant (one for
    both) is checked as TenantOwned.save checks it, and by row-level security in the database. False (nothing
    stored) when a context value does not compile to one plain parameter."""
    ensure_scope_allows(conversation.tenant_id)
    database = Conversation.objects.db
    fields, compiler = _insert_compiler(context, database)
    values = [compiler.prepare_value(field, compiler.pre_save_val(field, context)) for field in fields]
    [placeholders], [params] = compiler.assemble_as_sql(fields, [values])
    if any(placeholder != "%s" for placeholder in placeholders):
        return False
    made, made_params = _insert_sql(conversation, database)
    quote = connections[database].ops.quote_name
    at = [field.name for field in fields].index("conversation")
    selected = [*placeholders[:at], 'c."id"', *placeholders[at + 1 :]]
    columns = ", ".join(quote(field.column) for field in fields)
    sql = (
        f"WITH c AS ({made}) INSERT INTO {quote(ConversationContext._meta.db_table)} ({columns}) "  # noqa: S608 - compiled names, values are parameters
        f'SELECT {", ".join(selected)} FROM c RETURNING "conversation_id", "id"'
    )
    with connections[database].cursor() as cursor:
        cursor.execute(sql, (*made_params, *params[:at], *params[at + 1 :]))
        conversation.pk, context.pk = cursor.fetchone()
    for row in (conversation, context):
        row._state.adding = False
        row._state.db = database
    context.conversation = conversation
    return True


def _insert_compiler(row: Any, database: str) -> tuple[list[Any], Any]:
    """The fields (all but the id) and the compiler of `row`'s INSERT."""
    fields = [field for field in type(row)._meta.local_concrete_fields if not field.primary_key]
    query = InsertQuery(type(row))
    query.insert_values(fields, [row])
    return fields, query.get_compiler(using=database)


def _insert_sql(row: Any, database: str) -> tuple[str, tuple]:
    """The INSERT Django compiles for `row` (its defaults, auto_now_add and adapters), returning its id."""
    _fields, compiler = _insert_compiler(row, database)
    compiler.returning_fields = [type(row)._meta.pk]
    [(insert, params)] = compiler.as_sql()
    return insert, tuple(params)


TITLE_CHARS = 40


def title_from(text: str) -> str:
    """A conversation title from its first message: the first words, on one line, at most TITLE_CHARS characters."""
    words = " ".join((text or "").split())
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1].rstrip() + "…"


def message_add(
    *,
    conversation: Conversation,
    role: str,
    content: str,
    tool_calls: list[dict] | None = None,
    tool_call_id: str | None = None,
    client_id: str | None = None,
    status: str = MessageStatus.COMPLETE,
    error_code: str = "",
    usage: dict[str, Any] | None = None,
    active: bool = True,
    return_existing: bool = True,
    trace_parent: str = "",
    unless_awaiting_tools: bool = False,
) -> Message:
    """Store a message and make it active. A message whose client_id was already stored is found when the unique
    constraint refuses the insert (looking first would cost every turn a statement): it is returned as it was, or
    with `return_existing=False` the IntegrityError is raised (the caller then knows it was not stored now).
    `unless_awaiting_tools`: ToolResultsPending (nothing stored) when the conversation waits for an API client's
    tool results; a resend is still found first."""
    return _message_add(
        conversation=conversation, role=role, content=content, tool_calls=tool_calls, tool_call_id=tool_call_id,
        client_id=client_id, status=status, error_code=error_code, usage=usage, active=active,
        return_existing=return_existing, trace_parent=trace_parent, unless_awaiting_tools=unless_awaiting_tools,
    )  # fmt: skip


class ToolResultsPending(Exception):
    """The conversation's last reply handed an API client its tool calls: it goes on only with their results."""


def user_message_add(
    *,
    conversation: Conversation,
    content: str,
    client_id: str | None,
    files: MessageFiles,
    user_id: int,
    unless_awaiting_tools: bool = False,
) -> tuple[Message, list[Attachment]]:
    """Store a user message with its files (checked by admission; the account `user_id` sent them) in one
    transaction: the files bound to it, written when they came with it, and counted in its tokens
    (memory.attachments). IntegrityError when its client_id was stored before (nothing of it is stored then)."""
    with transaction.atomic():
        message = _message_add(
            conversation=conversation, role=Role.USER, content=content, client_id=client_id, return_existing=False,
            extra_tokens=message_files_tokens(files, conversation),
            title=title_from(content) or title_from(files.title()), unless_awaiting_tools=unless_awaiting_tools,
        )  # fmt: skip
        stored = files_store(files=files, conversation=conversation, message=message, user_id=user_id)
    return message, stored


def _message_add(
    *,
    conversation: Conversation,
    role: str,
    content: str,
    tool_calls: list[dict] | None = None,
    tool_call_id: str | None = None,
    client_id: str | None = None,
    status: str = MessageStatus.COMPLETE,
    error_code: str = "",
    usage: dict[str, Any] | None = None,
    active: bool = True,
    return_existing: bool = True,
    trace_parent: str = "",
    extra_tokens: int = 0,
    title: str | None = None,
    unless_awaiting_tools: bool = False,
) -> Message:
    tokens = overflow.message_tokens(role, content, tool_calls, tool_call_id, conversation.model or "gpt-4")
    tokens += extra_tokens
    message = Message(
        tenant_id=conversation.tenant_id,
        conversation=conversation,
        role=role,
        content=content or "",
        tool_calls=tool_calls or None,
        tool_call_id=tool_call_id or "",
        token_count=tokens,
        client_id=client_id or None,
        status=status,
        error_code=error_code,
        usage=usage,
        trace_parent=trace_parent,
    )
    # An untitled conversation is named after its first message (in the same statement).
    title = (title or title_from(content)) if role == Role.USER and not conversation.title else None
    try:
        with transaction.atomic():
            _store(message, conversation, active=active, title=title, unless_awaiting_tools=unless_awaiting_tools)
    except IntegrityError:
        # The same client_id arrived twice (a resend, or two at once): the first one stored it.
        if client_id and return_existing:
            existing = Message.objects.filter(conversation=conversation, client_id=client_id).first()
            if existing is not None:
                return existing
        raise
    return message


def _store(
    message: Message,
    conversation: Conversation,
    *,
    active: bool,
    title: str | None,
    unless_awaiting_tools: bool = False,
) -> None:
    """Insert `message`, append it to the conversation's context when `active`, and touch the conversation (its time;
    its `title` when given and it has none): one statement on PostgreSQL, three elsewhere (call inside a
    transaction). `unless_awaiting_tools`: raise ToolResultsPending when the message before it is a reply that handed
    an API client its tool calls (the caller's transaction then takes the insert back); on PostgreSQL the same
    statement reads it, so the check costs a turn nothing."""
    if connections[Message.objects.db].vendor == "postgresql":
        awaiting = _store_in_one_statement(
            message, conversation, active=active, title=title, read_previous=unless_awaiting_tools
        )
        if awaiting:
            raise ToolResultsPending(conversation.pk)
        return
    message.save(force_insert=True)
    if unless_awaiting_tools:
        previous = (
            Message.objects.filter(conversation=conversation, id__lt=message.pk)
            .order_by("-id")
            .values_list("role", "tool_calls")
            .first()
        )
        if previous is not None and previous[0] == Role.ASSISTANT and bool(previous[1]):
            raise ToolResultsPending(conversation.pk)
    if active:
        context_ids_append(conversation, [message.pk])
    changes: dict[str, Any] = {"updated_at": timezone.now()}
    if title is not None:
        changes["title"] = Case(When(title="", then=Value(title)), default=F("title"))
    Conversation.objects.filter(pk=conversation.pk).update(**changes)


def _store_in_one_statement(
    message: Message, conversation: Conversation, *, active: bool, title: str | None, read_previous: bool
) -> bool:
    """_store as one data-modifying WITH: the insert Django compiles (its defaults, auto_now_add and JSON adapters),
    the context's append and the conversation's touch run on the insert's RETURNING id, in one round trip. The row's
    tenant is checked as TenantOwned.save checks it (and row-level security again in the database). With
    `read_previous`, returns whether the message before it hands an API client its tool calls (the WITH's parts all
    read the snapshot from before the insert, so the newest message they see is the previous one)."""
    ensure_scope_allows(message.tenant_id)
    database = Message.objects.db
    insert, params = _insert_sql(message, database)
    now = timezone.now()
    parts = [f"WITH m AS ({insert})"]
    if active:
        parts.append(
            ', c AS (UPDATE "memory_conversationcontext" SET "active_messages" = '
            "(COALESCE(\"active_messages\", '[]'::jsonb) || jsonb_build_array((SELECT id FROM m))), "
            '"updated_at" = %s WHERE "conversation_id" = %s AND "tenant_id" = %s)'
        )
        params = (*params, now, conversation.pk, conversation.tenant_id)
    if title is not None:
        touch = '"updated_at" = %s, "title" = CASE WHEN "title" = \'\' THEN %s ELSE "title" END'
        params = (*params, now, title)
    else:
        touch = '"updated_at" = %s'
        params = (*params, now)
    touched = f', v AS (UPDATE "memory_conversation" SET {touch} WHERE "id" = %s AND "tenant_id" = %s)'  # noqa: S608 - constant text, values are parameters
    parts.append(touched)
    params = (*params, conversation.pk, conversation.tenant_id)
    if read_previous:
        parts.append(
            ', p AS (SELECT "role", "tool_calls" FROM "memory_message" '
            'WHERE "conversation_id" = %s AND "tenant_id" = %s ORDER BY "id" DESC LIMIT 1) '
            'SELECT id, EXISTS (SELECT 1 FROM p WHERE "role" = %s AND '
            'jsonb_typeof("tool_calls") = \'array\' AND jsonb_array_length("tool_calls") > 0) FROM m'
        )
        params = (*params, conversation.pk, conversation.tenant_id, Role.ASSISTANT.value)
    else:
        parts.append(" SELECT id, false FROM m")
    with connections[database].cursor() as cursor:
        cursor.execute("".join(parts), params)
        message.pk, awaiting = cursor.fetchone()
    message._state.adding = False
    message._state.db = database
    return bool(awaiting)


def messages_import(*, conversation: Conversation, messages: Sequence[ChatMessage]) -> list[Message]:
    """Store a history a client brought (the OpenAI-compatible API's `messages`, tool calls and results included),
    oldest first, as active messages: one insert and one context update however long it is."""
    model = conversation.model or "gpt-4"
    rows = [
        Message(
            tenant_id=conversation.tenant_id,
            conversation=conversation,
            role=message.role,
            content=message.text,
            tool_calls=list(message.tool_calls) if message.tool_calls else None,
            tool_call_id=message.tool_call_id or "",
            token_count=overflow.message_tokens(
                message.role, message.text, message.tool_calls, message.tool_call_id, model
            ),
        )
        for message in messages
    ]
    if not rows:
        return []
    with transaction.atomic():
        stored = Message.objects.bulk_create(rows)
        if any(message.pk is None for message in stored):  # a database that does not return ids (none of ours)
            stored = list(Message.objects.filter(conversation=conversation).order_by("id"))[-len(rows) :]
        context_ids_append(conversation, [message.pk for message in stored])
    return stored


def assistant_message_finish(
    *,
    conversation: Conversation,
    content: str,
    tool_calls: list[dict] | None = None,
    usage: dict[str, Any] | None = None,
    error_code: str = "",
) -> Message:
    """Store the assistant's reply: complete, partial (an error after some text) or error (nothing arrived).

    A partial reply stays in the context (the user saw it); an empty failed one does not.
    """
    if not error_code:
        status = MessageStatus.COMPLETE
    elif content or tool_calls:
        status = MessageStatus.PARTIAL
    else:
        status = MessageStatus.ERROR
    # A partial reply's tool calls were never run: only its text is kept.
    if status != MessageStatus.COMPLETE:
        tool_calls = None
    return message_add(
        conversation=conversation,
        role=Role.ASSISTANT,
        content=content,
        tool_calls=tool_calls,
        status=status,
        error_code=error_code,
        usage=usage,
        active=status != MessageStatus.ERROR,
        trace_parent=tracing.carrier().get("traceparent", ""),
    )


def tool_exchange_add(
    *,
    conversation: Conversation,
    content: str,
    tool_calls: list[dict],
    results: Sequence[tuple[str, str]],
    usage: dict[str, Any] | None = None,
    tool_context: dict[str, Any] | None = None,
    failed: Collection[str] = (),
) -> list[Message]:
    """Store one round of tool use in one transaction: the assistant message with its `tool_calls`, then one tool
    message per `(tool_call_id, content)` in `results`, so history and the overflow strategies see them paired.
    The results of the calls in `failed` (their ids) are stored with status error, still in the context (the model
    reads why), so a reloaded page tells the same outcome as the live one. `tool_context`, when given, becomes the
    conversation's tool context (A5)."""
    with transaction.atomic():
        stored = [
            message_add(
                conversation=conversation, role=Role.ASSISTANT, content=content, tool_calls=tool_calls, usage=usage
            )
        ]
        stored += [
            message_add(
                conversation=conversation,
                role=Role.TOOL,
                content=text,
                tool_call_id=call_id,
                status=MessageStatus.ERROR if call_id in failed else MessageStatus.COMPLETE,
            )
            for call_id, text in results
        ]
        if tool_context is not None:
            ConversationContext.objects.filter(conversation=conversation).update(tool_context=tool_context)
    return stored


def conversation_tool_context_set(*, conversation: Conversation, tool_context: dict[str, Any]) -> None:
    """Keep the turn's tool context for the conversation's next turns."""
    ConversationContext.objects.filter(conversation=conversation).update(tool_context=tool_context)


def _summary_may_queue(context: ConversationContext) -> bool:
    """No summary is pending, or the pending one is so old that its worker must have died."""
    stale = context.summary_queued_at is None or context.summary_queued_at < timezone.now() - SUMMARY_PENDING_TIMEOUT
    return not context.summary_pending or stale


def context_build(
    *,
    conversation: Conversation,
    system_prompt: str,
    model: str | None = None,
    recalled: Sequence[str] = (),
    context: ConversationContext | None = None,
) -> BuiltContext:
    """The messages to send this turn: the conversation's strategy applied to its active messages, with the files
    they carry and the passages of the conversation's large documents (memory.attachments; read only when the
    conversation has files). `context` is the conversation's context row when the caller has just read it this turn
    (it is read here otherwise).

    Drops what the strategy dropped, records the metrics when it acted, and queues the summary task on commit
    when messages are marked for summary and no summary is already pending.
    """
    model = model or conversation.model or "gpt-4"
    # Read without a lock: most turns change nothing, and a row lock costs a WAL flush at commit on PostgreSQL.
    if context is None or context.conversation_id != conversation.pk:
        context = ConversationContext.objects.get(conversation=conversation)
    config = overflow.OverflowConfig.from_dict(context.strategy_config)
    files = conversation_files(conversation) if context.attachments else []
    turn_files = files_for_turn(conversation=conversation, files=files) if files else FilesInTurn()
    fixed = overflow.fixed_tokens(
        system_prompt=system_prompt, summary=context.summary, recalled=recalled, model=model, documents=turn_files.block
    )
    strategy = overflow.get_strategy(config.strategy)
    messages, unloaded_tokens = active_stored(
        context.active_messages, conversation, strategy=strategy, config=config, fixed_tokens=fixed
    )
    window = strategy.select(messages, config, fixed_tokens=fixed)
    if unloaded_tokens:
        # Older active messages the strategy could not keep were never loaded: they are dropped too.
        window = replace(window, triggered=True, tokens_saved=window.tokens_saved + unloaded_tokens)
    context, requeued = _context_kept(conversation, context, messages, window)
    if window.triggered or requeued:
        overflow_metric_add(
            tenant_id=conversation.tenant_id,
            agent_id=conversation.agent_id,
            triggers=int(window.triggered),
            summaries_retried=int(requeued),
            tokens_saved=window.tokens_saved if window.triggered else 0,
        )
    if files:
        ids = [message.id for message in window.messages]
        turn_files = files_for_window(conversation=conversation, files=files, message_ids=ids, turn=turn_files)
    request = overflow.build_model_messages(
        system_prompt=system_prompt, summary=context.summary, window=window, recalled=recalled,
        documents=turn_files.block, additions=turn_files.additions,
    )  # fmt: skip
    return BuiltContext(messages=request, window=window, files=turn_files)


def _context_kept(
    conversation: Conversation,
    context: ConversationContext,
    messages: Sequence[overflow.StoredMessage],
    window: overflow.Window,
) -> tuple[ConversationContext, bool]:
    """Take out of the context what left it (what the strategy dropped, and active ids that were not loaded: too
    old, or deleted) and queue the summary of what it marked; (the context, whether a lost summary was queued
    again)."""
    loaded = {message.id for message in messages}
    removed = set(window.dropped_ids) | {pk for pk in context.active_messages if pk not in loaded}
    summarize_ids = list(window.summarize_ids)
    requeued = False
    if removed or (summarize_ids and _summary_may_queue(context)):
        with transaction.atomic():
            # Under the lock: ids appended by a concurrent turn stay, and only one summary task is queued.
            context = ConversationContext.objects.select_for_update().get(pk=context.pk)
            changed = []
            active = [pk for pk in context.active_messages if pk not in removed]
            if active != context.active_messages:
                context.active_messages = active
                changed.append("active_messages")
            if summarize_ids and _summary_may_queue(context):
                # Still pending but stale: the summary was lost (its worker died, the broker dropped it); queued again.
                requeued = context.summary_pending
                context.summary_pending = True
                context.summary_queued_at = timezone.now()
                changed += ["summary_pending", "summary_queued_at"]
                tenant_id, conversation_id = conversation.tenant_id, conversation.pk
                transaction.on_commit(lambda: summarize_conversation.delay(tenant_id, conversation_id, summarize_ids))
            if changed:
                context.save(update_fields=[*changed, "updated_at"])
    return context, requeued


# The embedded default has no worker: extraction runs on one background thread of this process, after the reply is
# stored, as a Celery worker would run it.
extract_line = BackgroundLine("memory-extract", threads=1)


def after_turn(
    *,
    conversation: Conversation,
    user_message_id: int,
    reply_message_id: int | None,
    mode: str,
    answer: str | None = None,
) -> None:
    """Queue the memory work of a finished turn (on commit): index the turn, extract its events by `mode` (for
    `combined`, from the model's whole `answer`)."""
    args = (conversation.tenant_id, conversation.pk, user_message_id, reply_message_id, mode, answer)
    if current_app.conf.task_always_eager and setting("MEMORY_EXTRACT_IN_THREAD"):
        transaction.on_commit(lambda: extract_line.submit(extract_turn_memory, *args))
    else:
        transaction.on_commit(lambda: extract_turn_memory.delay(*args))
