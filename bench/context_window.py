"""Building the model's context for a 10,000-message conversation: the platform against LangChain's trim_messages.

    make install                                            # langchain-core (requirements-dev.txt) included
    DATABASE_URL=postgres://... .venv/bin/python bench/context_window.py [--messages 10000] [--runs 20]

The conversation is made of real dialogue turns (LoCoMo, ../shared/data/memory), cycled to --messages messages
and stored in the database with their token counts, as the platform stores them (computed once, on arrival).
Strategy: sliding window, max_tokens 8192, reserve 10%.

Measured (median of --runs):
- platform, cold: memory.services.context_build as a chat turn calls it (load, select, pruning the active list,
  the one-system-message request) with all 10,000 messages active (reset before each run);
- platform, per turn: the same once the window has been applied (the steady state of a long conversation);
- LangChain: trim_messages(strategy="last") over the same messages already in memory, with a tiktoken counter.
Both sides get the same room (the budget less the system message) and count messages the same way, so their
kept sets can be compared. Goal: at least 50x faster than LangChain, the context built in under 15 ms.

Needs: `make install` (langchain-core comes with the tests' requirements); ../shared/data/memory/locomo_dev.json
(BENCH_DATA_DIR elsewhere); a DATABASE_URL of yours for PostgreSQL figures (without it, a throwaway SQLite
database). Each missing one stops the bench at once with what to do.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA_DIR, bench_parser, require_data, require_module, setup_django

LOCOMO = DATA_DIR / "memory" / "locomo_dev.json"
SYSTEM_PROMPT = "You are a helpful assistant. 你是一个乐于助人的助手。"
MODEL = "gpt-4"


def dialogue_turns() -> list[str]:
    """Every turn of the LoCoMo conversations, in order."""
    conversations = json.loads(LOCOMO.read_text())
    turns = []
    for item in conversations:
        sessions = item["conversation"]
        numbers = sorted(int(key.split("_")[1]) for key in sessions if key.count("_") == 1 and key[8:].isdigit())
        for number in numbers:
            turns.extend(turn["text"] for turn in sessions[f"session_{number}"])
    return turns


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def build_conversation(count: int):
    from django.db import connection

    from agents.services import agent_create, conversation_start
    from llm.services import provider_ensure_demo
    from memory import overflow
    from memory.models import ConversationContext, Message
    from tenants.services import tenant_ensure, user_ensure

    tenant = tenant_ensure(slug="bench-context", name="Bench context")
    user = user_ensure(username="bench-context", password="unused-bench-password")  # noqa: S106
    from tenants.scope import tenant_scope

    scope = tenant_scope(tenant)
    scope.__enter__()
    provider_ensure_demo(tenant=tenant)
    config = {"strategy": "sliding_window", "max_tokens": 8192, "reserve_ratio": 0.1}
    from agents.models import Agent

    Agent.objects.filter(name="bench-context").delete()
    agent = agent_create(tenant=tenant, name="bench-context", system_prompt=SYSTEM_PROMPT, token_overflow_config=config)
    conversation = conversation_start(agent=agent, user=user)
    turns = dialogue_turns()
    rows = []
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        content = turns[i % len(turns)]
        rows.append(
            Message(
                tenant=tenant,
                conversation=conversation,
                role=role,
                content=content,
                token_count=overflow.message_tokens(role, content, None, None, MODEL),
            )
        )
    created = Message.objects.bulk_create(rows, batch_size=2000)
    ids = [message.pk for message in created]
    if ids[0] is None:  # backends that do not return ids from bulk_create
        ids = list(Message.objects.filter(conversation=conversation).order_by("pk").values_list("pk", flat=True))
    ConversationContext.objects.filter(conversation=conversation).update(active_messages=ids)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # as autovacuum would after a bulk load
            cursor.execute("ANALYZE memory_message")
    return tenant, conversation, ids, scope


def main() -> None:
    parser = bench_parser(__doc__, smoke="1,000 messages (the window drops some), 3 runs")
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    if args.smoke:
        args.messages, args.runs = 1000, 3
    require_data(LOCOMO)
    require_module("langchain_core", "make install (or .venv/bin/pip install -r bench/requirements.txt)")
    setup_django(prefix="context-bench-")

    from django.db import connection
    from langchain_core.messages import AIMessage, HumanMessage, trim_messages  # checked above, before the set-up

    from memory import overflow
    from memory.models import ConversationContext, Message
    from memory.services import context_build

    started = time.perf_counter()
    _tenant, conversation, ids, scope = build_conversation(args.messages)
    print(f"database: {connection.vendor}; {len(ids)} messages stored in {time.perf_counter() - started:.1f} s")

    context = ConversationContext.objects.get(conversation=conversation)
    config = overflow.OverflowConfig.from_dict(context.strategy_config)
    fixed = overflow.fixed_tokens(system_prompt=SYSTEM_PROMPT, summary=None, model=MODEL)
    room = config.budget - fixed

    def all_active() -> None:
        ConversationContext.objects.filter(conversation=conversation).update(active_messages=ids)

    cold = []
    for _ in range(args.runs):
        all_active()
        t0 = time.perf_counter()
        built = context_build(conversation=conversation, system_prompt=SYSTEM_PROMPT, model=MODEL)
        cold.append(time.perf_counter() - t0)
    platform_kept = [message.id for message in built.window.messages]

    # LangChain gets the same messages, already in memory, and a per-message tiktoken counter.
    messages = list(Message.objects.filter(conversation=conversation).order_by("pk"))
    lc_messages = [(HumanMessage if m.role == "user" else AIMessage)(content=m.content, id=str(m.pk)) for m in messages]

    def tiktoken_counter(batch) -> int:
        # LangChain calls the counter on lists of messages; each message is counted as the platform counts it.
        return sum(
            overflow.message_tokens(
                "user" if isinstance(m, HumanMessage) else "assistant", m.content, None, None, MODEL
            )
            for m in batch
        )

    langchain = []
    for _ in range(max(3, args.runs // 4)):
        t0 = time.perf_counter()
        trimmed = trim_messages(lc_messages, max_tokens=room, token_counter=tiktoken_counter, strategy="last")
        langchain.append(time.perf_counter() - t0)
    langchain_kept = [int(m.id) for m in trimmed]

    per_turn = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        built = context_build(conversation=conversation, system_prompt=SYSTEM_PROMPT, model=MODEL)
        per_turn.append(time.perf_counter() - t0)
    assert [m.content for m in built.messages[1:]] == [m.content for m in messages if m.pk in set(platform_kept)]
    scope.__exit__(None, None, None)

    lc_ms, cold_ms, turn_ms = median_ms(langchain), median_ms(cold), median_ms(per_turn)
    print(f"window: max_tokens {config.max_tokens}, reserve {config.reserve_ratio:.0%}, room for messages {room}")
    print(f"  platform, context_build, all {len(ids)} active (cold): {cold_ms:8.2f} ms   kept {len(platform_kept)}")
    print(f"  platform, context_build per turn (steady state):  {turn_ms:8.2f} ms")
    print(f"  LangChain trim_messages (tiktoken counter):        {lc_ms:8.2f} ms   kept {len(langchain_kept)}")
    print(f"  ratio LangChain / platform: per turn {lc_ms / turn_ms:.1f}x, cold {lc_ms / cold_ms:.1f}x (goal >= 50x)")
    same = platform_kept == langchain_kept
    print(f"  same kept messages: {same}")
    met = lc_ms / turn_ms >= 50 and turn_ms < 15 and same
    print(f"  goal (per turn: >= 50x and under 15 ms, same set): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
