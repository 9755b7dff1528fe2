"""Long-term memory recall on LoCoMo: evidence recall@10 of the event graph against plain retrieval over turns, and
the cost of recall on the reply path (issue 14, point 7).

    .venv/bin/python bench/memory_recall.py                         # SQLite temp file; quality, then 10,000 events
    .venv/bin/python bench/memory_recall.py --database postgres     # PostgreSQL 127.0.0.1:5432 (bench db made, dropped)
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample # quality only, with a table per conversation
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample --data ~/.cache/agentplat-memory-bench/realtalk.json
                                                                    # the held-out set (bench/realtalk_build.py)
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample --set memorybank-en   # bench/memorybank_build.py
    MEMORY_EMBEDDER=local_multilingual .venv/bin/python bench/memory_recall.py --events 0 --per-sample \\
        --set memorybank-zh                                         # the Chinese set with the multilingual model

Data (read in place, never copied): ../shared/data/memory/locomo_dev.json, two LoCoMo conversations (conv-26:
Caroline and Melanie, conv-30: Jon and Gina; 19 sessions each, 788 turns) and their questions with the dia_ids of
their evidence. Categories 1-4 are scored (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop; 5, adversarial,
has no evidence to find). --data reads another set in the same shape instead: REALTALK, ten real conversations
that bench/realtalk_build.py converts from a fetched copy (a held-out check: nothing is tuned on it). --set NAME
reads a named set from where its builder writes it (SETS: locomo, realtalk, memorybank-en, memorybank-zh: people
talking with an AI companion, English and Chinese, built by bench/memorybank_build.py; ualong-en, ualong-zh: those
buried in long user–assistant chats, bench/ualong_build.py; ualong-en-topic, ualong-zh-topic: the same asked questions
linked by topic rather than words, written for this project). A set whose
rows carry a `split` ("dev" to tune on, "check" to confirm on) gets a table per half. With --smoke and a MemoryBank
set not built here (CI), the bench says so and reads the committed made-up sample bench/data/memorybank_sample/
converted by the builder instead.

Storing, through the real pipeline: per LoCoMo conversation a tenant user talks to one agent; each session is one
Conversation (agents.services.conversation_start), its turns are memory.models.Message rows (memory.services.
message_add; "Speaker: text", with "[shares <caption>]" for a shared photo), the session's first speaker as the user
and the other as the assistant. Each exchange (a user message and the reply after it; a message with no partner is
an exchange alone) then goes through memory.longterm.extraction.turn_memory_extract(mode="rules"): the turn is
indexed (TurnMemory), each message becomes one event (rule_event), entities are found by rules, and events_store
links the event to the previous event of the conversation (`follows`) and to the last three events naming one of
its entities (`refers_to`). turn_memory_extract reads the clock for the event time; the bench runs it with the
clock at the session's date (LoCoMo's session_N_date_time), so the timeline is the conversation's own.

What the offline rules can and cannot do: they give one event per message (the message itself, up to 500
characters, is the summary: no condensing), entities by capitalisation and part of speech, `follows` within a
conversation and `refers_to` by a shared entity name. They cannot see causes (`causes`), that a later message
contradicts an earlier one (supersession), that something pending was settled (`resolves`), nor merge two
messages into one fact: those need the model (mode "model"), which this offline bench does not call.

Scoring: for each question the top 10 turns (dia_ids) of each method; evidence recall@10 is the share of the
question's evidence dia_ids among them, and for multi-hop questions "all@10" is the share of questions with all
their evidence there. The questions are asked the day after the last session (what "last year" in a question is
resolved against). Methods, side by side in one run:
  memory   the event graph as a turn recalls it: events_walk (MEMORY_EVENTS_TOP_K seeds, MEMORY_EXPAND_DEPTH hops,
           its default limit; walked events ranked with the seeds), events mapped back to their turns through
           source_message_ids, deduplicated in the walk's order, first 10;
  bm25     BM25 over the turns (one document per turn);
  vector   cosine of the local MiniLM over the turns;
  hybrid   the knowledge bases' hybrid over the turns (collection_rank.rank_collection: BM25 and vectors
           fused by z-scores).
Columns added after them (issue 30): "shown", what the reply actually sees (the walked events the passages fit in
the timeline's share of the recall budget, recall.recall_budget(--window) x recall.EVENTS_SHARE, in the walk's
order, mapped to turns the same way, first 10; --shown-at B adds the same within a recall budget of B tokens);
"walk0", memory with the walk off (depth 0), "shown0" what the reply sees with it off. Extra rows: "walk-only", the
questions with two or more evidence turns of which one shares no keyword term with the question (only a walk from
the others reaches it); "dev halves", each conversation alone (recall@10, multi-hop all@10, temporal, walk-only)
with the walk's gain and shown - hybrid. --tune NAME=V1,V2 (repeatable) tries values of a constant (MEMORY_*
settings, walk.X, store.X) on each half: the value best on one half (recall@10 + multi-hop all@10) is kept only if
it also beats the current value on the other half.

Cost on the reply path: --events N (default 10,000) events for one user, made from the stored LoCoMo graph by
copying it (each copy of an event a slightly perturbed text with its own hash, its vector plus Gaussian noise,
cosine ~0.9 to the source; the copy's relations and entity links mirrored; copies in their own conversations,
later in time), inserted in bulk. memory.longterm.recall.recall_for_turn(conversation, question) is timed for the
questions after one warming call (model loaded, collections built): with the question's embedding computed each
time (what a new message costs), and with it cached (the rest). Goals (issue 14): evidence recall@10 >= 0.75 on
categories 1-4, multi-hop all@10 >= 0.30 (a plain hybrid over turns gets about 0.6 and 0.15); recall p95 < 30 ms
with 10,000 events on PostgreSQL.

Vectors of stored texts are cached on disk (--cache, outside the repository) so a second run does not embed
everything again; questions are always embedded by the model.

Needs: `make install`; ../shared/data/memory/locomo_dev.json (BENCH_DATA_DIR elsewhere); --database postgres: the
PostgreSQL server on 127.0.0.1:5432 with the role agentplat able to create databases (a missing role is created
when this machine's `postgres` superuser can, otherwise the bench says how). Each missing one stops the bench at once
with what to do.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DATA_DIR, bench_parser, ensure_postgres, require_data, setup_django, sqlite_url
from kb_retrieval import CachedEmbedder, percentile

LOCOMO = DATA_DIR / "memory" / "locomo_dev.json"
BUILT = Path.home() / ".cache" / "agentplat-memory-bench"  # where bench/*_build.py write the sets they convert
SETS = {
    "locomo": LOCOMO,
    "realtalk": BUILT / "realtalk.json",
    "memorybank-en": BUILT / "memorybank_en.json",
    "memorybank-zh": BUILT / "memorybank_zh.json",
    "ualong-en": BUILT / "ualong_en.json",
    "ualong-zh": BUILT / "ualong_zh.json",
    "ualong-en-topic": BUILT / "ualong_en_topic.json",
    "ualong-zh-topic": BUILT / "ualong_zh_topic.json",
}
POSTGRES_URL = "postgres://agentplat@127.0.0.1:5432/memory_recall_bench"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
METHODS = ("memory", "bm25", "vector", "hybrid")
# The table's columns: the methods, what the reply sees, the walk off (memory and what the reply sees).
COLUMNS = (*METHODS, "shown", "walk0", "shown0")
TOP = 10
GOAL_RECALL = 0.75
GOAL_ALL = 0.30
GOAL_P95_MS = 30.0
DEMO_WINDOW = 32768  # the demo model's window (llm.services.DEMO_CHAT_MODELS), the bench's default --window
SHOWN_AT: list[int] = []  # --shown-at: recall budgets whose "shown" is a column too (shown@B)
WINDOW = {"tokens": None}  # the agent model's context window "shown" is packed for (--window; None: unknown)


# --- data ----------------------------------------------------------------------------------------------------------


@dataclass
class Turn:
    dia_id: str
    speaker: str
    content: str


@dataclass
class Session:
    number: int
    when: dt.datetime
    turns: list[Turn]


@dataclass
class Question:
    text: str
    category: int
    evidence: frozenset[str]


@dataclass
class Sample:
    sample_id: str
    speakers: tuple[str, str]
    sessions: list[Session]
    questions: list[Question]
    message_dia: dict[int, str] = field(default_factory=dict)  # stored message id -> dia_id
    split: str = ""  # "dev" (to tune on) or "check" (to confirm on) where the set says

    @property
    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions for turn in session.turns]


def session_date(text: str) -> dt.datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as an aware datetime (UTC)."""
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def turn_content(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text'].strip()}"
    if turn.get("blip_caption"):
        text += f" [shares {turn['blip_caption'].strip()}]"
    return text


def evidence_ids(entries: list[str]) -> frozenset[str]:
    """The dia_ids of a question's evidence (one entry of the set is "D8:6; D9:17")."""
    return frozenset(part for entry in entries for part in re.split(r"[;,\s]+", entry) if part)


def load_locomo(path: Path = LOCOMO) -> list[Sample]:
    samples = []
    for row in json.loads(path.read_text(encoding="utf-8")):
        conversation = row["conversation"]
        sessions = []
        for key, turns in conversation.items():
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not isinstance(turns, list) or not turns:
                continue
            sessions.append(
                Session(
                    number=int(match.group(1)),
                    when=session_date(conversation[f"{key}_date_time"]),
                    turns=[Turn(t["dia_id"], t["speaker"], turn_content(t)) for t in turns],
                )
            )
        sessions.sort(key=lambda session: session.number)
        questions = [
            Question(qa["question"], int(qa["category"]), evidence_ids(qa.get("evidence") or []))
            for qa in row["qa"]
            if int(qa["category"]) in CATEGORIES and qa.get("evidence")
        ]
        speakers = (conversation["speaker_a"], conversation["speaker_b"])
        samples.append(Sample(row["sample_id"], speakers, sessions, questions, split=row.get("split", "")))
    return samples


def smoke_samples(samples: list[Sample], *, sessions: int = 2, per_category: int = 2) -> list[Sample]:
    """The samples cut down for --smoke: each one's first `sessions` sessions, and of the questions whose evidence
    lies in them up to `per_category` of each category."""
    cut = []
    for sample in samples:
        kept = sample.sessions[:sessions]
        turns = {turn.dia_id for session in kept for turn in session.turns}
        taken: Counter = Counter()
        questions = []
        for question in sample.questions:
            if question.evidence <= turns and taken[question.category] < per_category:
                taken[question.category] += 1
                questions.append(question)
        cut.append(Sample(sample.sample_id, sample.speakers, kept, questions, split=sample.split))
    return cut


def smoke_memorybank(name: str) -> Path:
    """For --smoke where the MemoryBank set is not built (CI): the committed made-up sample in MemoryBank's layout,
    converted by bench/memorybank_build.py into a temporary file."""
    import memorybank_build  # the builder loads jieba: only this smoke path needs it

    language = next(language for language in memorybank_build.Language if language.set_name == name)
    path = memorybank_build.output_path(language, Path(tempfile.mkdtemp(prefix="memorybank-smoke-")))
    print(f"{name}: not built here ({SETS[name]}): the smoke reads the committed sample {memorybank_build.SAMPLE}")
    memorybank_build.build(memorybank_build.SAMPLE, language, path)
    return path


# --- set-up --------------------------------------------------------------------------------------------------------


def prepare_database(kind: str) -> str:
    if kind == "sqlite":
        url = sqlite_url("memory-bench-")
    else:
        url = POSTGRES_URL if kind == "postgres" else kind
        ensure_postgres(url, fresh=True)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("MEDIA_ROOT", tempfile.mkdtemp(prefix="memory-bench-media-"))
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
    os.environ.setdefault("DJANGO_TIME_ZONE", "UTC")  # LoCoMo's session times carry no zone: read them as they are
    return url


def _drop_database(url: str) -> None:
    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class _Clock:
    """What turn_memory_extract sees as django.utils.timezone: now() is the session's date."""

    def __init__(self, when: dt.datetime) -> None:
        self.when = when

    def now(self) -> dt.datetime:
        return self.when


class _SeededIds:
    """Stands in for `secrets` where event ids are made: the same random-looking suffixes on every run. The ids are
    in the lines the reply sees, so their token counts decide which events fit the budget at its edge ("shown")."""

    def __init__(self, seed: str) -> None:
        self.random = random.Random(seed)

    def token_hex(self, nbytes: int) -> str:
        return self.random.randbytes(nbytes).hex()


def store_sample(tenant, sample: Sample) -> tuple:
    """The sample's sessions stored as conversations of one user with one agent, through the real pipeline."""
    from django.contrib.auth import get_user_model

    from agents.services import agent_create, conversation_start
    from memory.longterm import extraction
    from memory.longterm.events import storing
    from memory.longterm.recall import owner_of
    from memory.services import message_add

    user = get_user_model().objects.create_user(username=f"locomo-{sample.sample_id}")
    agent = agent_create(
        tenant=tenant, name=f"LoCoMo {sample.sample_id}", model="gpt-4", system_prompt="You are a friend.",
        token_overflow_config={"strategy": "none"},
    )  # fmt: skip
    exchanges = alone = 0
    conversation = None
    ids = _SeededIds(sample.sample_id)
    for session in sample.sessions:
        conversation = conversation_start(agent=agent, user=user, title=f"{sample.sample_id} session {session.number}")
        opener = session.turns[0].speaker
        stored = []
        for turn in session.turns:
            role = "user" if turn.speaker == opener else "assistant"
            message = message_add(conversation=conversation, role=role, content=turn.content)
            sample.message_dia[message.pk] = turn.dia_id
            stored.append(message)
        pairs: list[tuple] = []
        for message in stored:
            if message.role == "assistant" and pairs and pairs[-1][1] is None and pairs[-1][0].role == "user":
                pairs[-1] = (pairs[-1][0], message)
            else:
                pairs.append((message, None))
        clock = mock.patch.object(extraction, "timezone", _Clock(session.when))
        with clock, mock.patch.object(storing, "secrets", ids):
            for first, reply in pairs:
                extraction.turn_memory_extract(
                    conversation=conversation, user_message_id=first.pk,
                    reply_message_id=reply.pk if reply is not None else None, mode="rules",
                )  # fmt: skip
                exchanges += 1
                alone += reply is None
    return user, agent, owner_of(conversation), exchanges, alone


def describe_graph(owner, exchanges: int, alone: int, elapsed: float) -> str:
    from memory.models import Entity, Event, EventRelation, TurnMemory

    events = Event.objects.filter(user_id=owner.user_id, key=owner.key)
    kinds = Counter(
        EventRelation.objects.filter(source__user_id=owner.user_id, source__key=owner.key).values_list(
            "kind", flat=True
        )
    )
    entities = Entity.objects.filter(user_id=owner.user_id, key=owner.key).count()
    turns = TurnMemory.objects.filter(user_id=owner.user_id, key=owner.key).count()
    relations = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"
    return (
        f"{exchanges} exchanges ({alone} of one message) -> {turns} indexed turns, {events.count()} events, "
        f"{entities} entities, relations: {relations} ({elapsed:.0f} s)"
    )


# --- the methods ---------------------------------------------------------------------------------------------------


class TurnIndex:
    """The baselines: one document per turn (its stored text), as BM25, vectors and the knowledge bases' hybrid."""

    def __init__(self, sample: Sample) -> None:
        from knowledge.keyword import BM25Index
        from knowledge.retrieval import Collection
        from memory.longterm import store

        turns = sample.turns
        self.dia = [turn.dia_id for turn in turns]
        ids = list(range(len(turns)))
        # The model memory would use for this conversation's language (MEMORY_EMBEDDER; "auto": by script).
        self.model = store.embedder_for(" ".join(turn.content for turn in turns))
        vectors = self.model.embed([turn.content for turn in turns]).astype(np.float32)
        terms = [store.stored_terms(turn.content) for turn in turns]
        self.collection = Collection(
            segments=(BM25Index(ids, terms),), vector_ids=np.asarray(ids, dtype=np.int64), matrix=vectors
        )

    def rank(self, method: str, query: str) -> list[str]:
        from collection_rank import rank_collection

        from knowledge.retrieval import query_vector

        if method == "vector":
            scores = self.collection.matrix @ query_vector(self.model, query)
            return [self.dia[i] for i in np.argsort(-scores, kind="stable")[:TOP]]
        embedder = self.model if method == "hybrid" else None
        ranked = rank_collection(self.collection, query, embedder=embedder, top_k=TOP)
        return [self.dia[i] for i, _ in ranked]


def memory_turns(owner, sample: Sample, query: str, depth: int | None = None) -> dict[str, list[str]]:
    """The turns the event graph recalls for `query` ("memory": the walk's order, first TOP) and those the reply
    sees ("shown": the events the timeline shows within the recall budget, in the walk's order, first TOP; and
    "shown@B" for each recall budget B of --shown-at); `depth` 0 is the walk off."""
    from core.conf import setting
    from memory.longterm import events as event_graph
    from memory.longterm.recall import EVENTS_SHARE, recall_budget

    depth = int(setting("MEMORY_EXPAND_DEPTH")) if depth is None else depth
    asked = sample.sessions[-1].when + dt.timedelta(days=1)  # the questions come after the last session
    walked = event_graph.events_walk(owner, query, top_k=int(setting("MEMORY_EVENTS_TOP_K")), depth=depth, now=asked)

    def turns_of(events) -> list[str]:
        dia = (sample.message_dia.get(pk) for event in events for pk in event.source_message_ids)
        return [d for d in dict.fromkeys(dia) if d is not None][:TOP]

    def shown_within(budget: int) -> list[str]:
        visible = {event.pk for event in event_graph.timeline(walked, budget_tokens=int(budget * EVENTS_SHARE))[1]}
        return turns_of([event for event in walked.events if event.pk in visible])

    turns = {"memory": turns_of(walked.events), "shown": shown_within(recall_budget(WINDOW["tokens"]))}
    for budget in SHOWN_AT:
        turns[f"shown@{budget}"] = shown_within(budget)
    return turns


def walk_only(sample: Sample, question: Question) -> bool:
    """A question only a walk can answer: two or more evidence turns, one of which shares no keyword term with the
    question (its own words cannot find it; it hangs on the other evidence)."""
    from memory.longterm import store

    if len(question.evidence) < 2:
        return False
    asked = set(store.fold_terms(store.stored_terms(store.keyword_query(question.text))).split())
    content = {turn.dia_id: turn.content.split(":", 1)[-1] for turn in sample.turns}
    terms = [set(store.fold_terms(store.stored_terms(content.get(dia, ""))).split()) for dia in question.evidence]
    return any(not (words & asked) for words in terms) and any(words & asked for words in terms)


@dataclass
class Scores:
    recall: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    complete: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, method: str, ranked: list[str], evidence: frozenset[str]) -> None:
        found = len(evidence & set(ranked[:TOP]))
        self.recall[method].append(found / len(evidence))
        self.complete[method].append(float(found == len(evidence)))


def evaluate(samples: list[Sample], owners: dict[str, object], methods=METHODS) -> tuple[dict, dict, dict]:
    """Per category ("all", "walk-only") and per sample (and per sample and category): Scores of every method and
    column; and the mean time per query."""
    from knowledge.retrieval import clear_query_vectors

    by_category: dict = defaultdict(Scores)
    by_sample: dict = defaultdict(Scores)
    times: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        index = TurnIndex(sample) if len(methods) > 1 else None
        for question in sample.questions:
            clear_query_vectors()
            ranked = {}
            started = time.perf_counter()
            ranked.update(memory_turns(owners[sample.sample_id], sample, question.text))
            times["memory"].append(time.perf_counter() - started)
            if index is not None:
                off = memory_turns(owners[sample.sample_id], sample, question.text, depth=0)
                ranked["walk0"], ranked["shown0"] = off["memory"], off["shown"]
            for method in methods[1:]:
                started = time.perf_counter()
                ranked[method] = index.rank(method, question.text)
                times[method].append(time.perf_counter() - started)
            keys = [(by_category, question.category), (by_category, "all"), (by_sample, sample.sample_id)]
            keys += [(by_sample, (sample.sample_id, question.category)), (by_sample, (sample.sample_id, "all"))]
            if walk_only(sample, question):
                keys += [(by_category, "walk-only"), (by_sample, (sample.sample_id, "walk-only"))]
            for method, turns in ranked.items():
                for table, key in keys:
                    table[key].add(method, turns, question.evidence)
    return by_category, by_sample, {method: statistics.mean(values) * 1000 for method, values in times.items()}


def _mean(values: list[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def print_table(title: str, rows: dict, keys: list, label) -> None:
    print(f"\n{title}: evidence recall@{TOP}")
    print(f"  {'':26s}" + "".join(f"{method:>11s}" for method in COLUMNS) + "   memory/hybrid")
    for key in keys:
        scores = rows.get(key)
        if scores is None:
            continue
        n = len(scores.recall["memory"])
        values = [_mean(scores.recall[method]) for method in COLUMNS]
        ratio = values[0] / values[3] if values[3] else float("nan")
        print(f"  {label(key) + f' ({n})':26s}" + "".join(f"{value:11.3f}" for value in values) + f"   {ratio:9.3f}")
        if key in (1, "walk-only"):
            values = [_mean(scores.complete[method]) for method in COLUMNS]
            ratio = values[0] / values[3] if values[3] else float("nan")
            print(f"  {'  all evidence@10':26s}" + "".join(f"{value:11.3f}" for value in values) + f"   {ratio:9.3f}")


HALF_COLUMNS = ("memory", "walk0", "shown", "shown0", "hybrid")


def print_halves(by_sample: dict, samples: list[Sample]) -> None:
    """The dev halves side by side: per conversation, recall@10 (all, temporal, walk-only) and all-evidence@10
    (multi-hop, walk-only) of the event graph with the walk on and off, what the reply sees, the per-turn hybrid."""
    print(f"\ndev halves: evidence recall@{TOP} (walk0: the walk off, depth 0; shown: what the reply sees)")
    print(f"  {'':34s}" + "".join(f"{column:>9s}" for column in HALF_COLUMNS) + "   walk gain  shown-hybrid")
    figures = (
        ("recall@10", "all", "recall"), ("multi-hop all@10", 1, "complete"), ("temporal recall@10", 2, "recall"),
        ("walk-only recall@10", "walk-only", "recall"), ("walk-only all@10", "walk-only", "complete"),
    )  # fmt: skip
    for sample in samples:
        for name, category, kind in figures:
            scores = by_sample.get((sample.sample_id, category))
            if scores is None:
                continue
            table = getattr(scores, kind)
            values = dict(zip(HALF_COLUMNS, (_mean(table[column]) for column in HALF_COLUMNS), strict=True))
            label = f"{sample.sample_id} {name} ({len(table['memory'])})"
            print(
                f"  {label:34s}" + "".join(f"{values[column]:9.3f}" for column in HALF_COLUMNS)
                + f"   {values['memory'] - values['walk0']:+9.3f}  {values['shown'] - values['hybrid']:+12.3f}"
            )  # fmt: skip


def print_splits(by_sample: dict, samples: list[Sample]) -> None:
    """A set's dev and check halves (its rows' `split`), each over its conversations' questions: recall@10 of every
    column, and multi-hop all@10."""
    splits = sorted({sample.split for sample in samples if sample.split}, key=lambda name: name != "dev")
    if not splits:
        return
    print(f"\nthe set's halves: evidence recall@{TOP} (dev: to tune on; check: to confirm on)")
    print(f"  {'':38s}" + "".join(f"{column:>11s}" for column in COLUMNS) + "   memory/hybrid  shown-hybrid")
    for split in splits:
        ids = [sample.sample_id for sample in samples if sample.split == split]
        for name, category, kind in (("recall@10", "all", "recall"), ("multi-hop all@10", 1, "complete")):
            table = Scores()
            for sid in ids:
                scores = by_sample.get((sid, category))
                for column in COLUMNS if scores is not None else ():
                    getattr(table, kind)[column].extend(getattr(scores, kind)[column])
            values = {column: _mean(getattr(table, kind)[column]) for column in COLUMNS}
            if not getattr(table, kind)["memory"]:
                continue
            label = f"{split} {name} ({len(ids)} conv., {len(getattr(table, kind)['memory'])} q.)"
            print(
                f"  {label:38s}" + "".join(f"{values[column]:11.3f}" for column in COLUMNS)
                + f"   {values['memory'] / values['hybrid'] if values['hybrid'] else float('nan'):13.3f}"
                + f"  {values['shown'] - values['hybrid']:+12.3f}"
            )  # fmt: skip


def print_goals(by_category: dict) -> None:
    overall, multi = by_category["all"], by_category[1]
    for method in ("memory", "hybrid"):
        value, complete = _mean(overall.recall[method]), _mean(multi.complete[method])
        print(
            f"  {method}: recall@10 {value:.3f} (goal >= {GOAL_RECALL}: {value / GOAL_RECALL:.2f}x), multi-hop "
            f"all@10 {complete:.3f} (goal >= {GOAL_ALL}: {complete / GOAL_ALL:.2f}x)"
        )


# --- tuning on a split ---------------------------------------------------------------------------------------------


def _target(name: str):
    """(object, attribute) a --tune or --const name sets: MEMORY_* a Django setting, "walk.X" / "store.X" /
    "rules.X" a module constant."""
    from django.conf import settings

    from memory.longterm import store
    from memory.longterm.events import rules, walk

    if "." not in name:
        return settings, name
    module, attribute = name.split(".", 1)
    return {"walk": walk, "store": store, "rules": rules}[module], attribute


def set_constants(specs: list[str]) -> None:
    """--const NAME=V: set a constant before anything is stored (what storing reads, e.g. rules.STATEMENT_CHARS,
    which --tune cannot try on a stored graph)."""
    from core.conf import setting

    for spec in specs:
        name, value = spec.split("=", 1)
        target, attribute = _target(name)
        current = getattr(target, attribute) if hasattr(target, attribute) else setting(attribute)
        setattr(target, attribute, type(current)(value))
        print(f"constant: {name}={value} (default {current})")


def tune(spec: str, samples: list[Sample], owners: dict) -> None:
    """--tune NAME=v1,v2,...: each value's recall@10 and multi-hop all@10 per conversation; the value chosen on one
    half (best sum of the two, the current value on a tie) is kept only if it also beats the current value on the
    other half."""
    from core.conf import setting

    name, values = spec.split("=", 1)
    target, attribute = _target(name)
    current = getattr(target, attribute) if hasattr(target, attribute) else setting(attribute)
    kind = type(current)
    figures: dict = {}
    ids = [sample.sample_id for sample in samples]
    for value in [current, *(kind(v) for v in values.split(",") if kind(v) != current)]:
        setattr(target, attribute, value)
        _, by_sample, _ = evaluate(samples, owners, methods=("memory",))
        figures[value] = {
            sid: (_mean(by_sample[(sid, "all")].recall["memory"]), _mean(by_sample[(sid, 1)].complete["memory"]))
            for sid in ids
        }
        row = "  ".join(f"{sid} recall@10 {r:.3f} multi-hop all@10 {a:.3f}" for sid, (r, a) in figures[value].items())
        print(f"  {name}={value!s:8s} {row}", flush=True)
    setattr(target, attribute, current)
    objective = {value: {sid: sum(pair) for sid, pair in row.items()} for value, row in figures.items()}
    for chosen_on, check_on in ((ids[0], ids[1]), (ids[1], ids[0])):
        best = max(objective, key=lambda value: (objective[value][chosen_on], value == current))
        gain = objective[best][check_on] - objective[current][check_on]
        verdict = "kept" if best != current and gain > 0 else "not kept" if best != current else "current is best"
        print(
            f"  {name}: chosen on {chosen_on}: {best}; on {check_on} recall@10 + multi-hop all@10 "
            f"{objective[best][check_on]:.3f} vs {objective[current][check_on]:.3f} with {current} ({gain:+.3f}): "
            f"{verdict}"
        )


# --- cost on the reply path ----------------------------------------------------------------------------------------


def _perturbed(text: str, rng: random.Random) -> str:
    """A near copy of a turn: one word dropped (past the speaker), sometimes one repeated."""
    words = text.split()
    if len(words) > 3:
        del words[rng.randrange(2, len(words))]
    if len(words) > 3 and rng.random() < 0.3:
        at = rng.randrange(1, len(words))
        words.insert(at, words[at])
    return " ".join(words)


def build_scale(tenant, sources: list, size: int, seed: int = 7):
    """One user with `size` events copied from the stored LoCoMo graphs (owners `sources`), inserted in bulk;
    returns a fresh conversation of that user (recall_for_turn's argument)."""
    from django.contrib.auth import get_user_model

    from agents.services import agent_create, conversation_start
    from memory.longterm import store
    from memory.longterm.recall import owner_of
    from memory.models import Conversation, Entity, Event, EventRelation

    user = get_user_model().objects.create_user(username="scale")
    agent = agent_create(
        tenant=tenant, name="Scale", model="gpt-4", system_prompt="You are a friend.",
        token_overflow_config={"strategy": "none"},
    )  # fmt: skip
    target = conversation_start(agent=agent, user=user, title="questions")
    owner = owner_of(target)
    originals = list(
        Event.objects.filter(user_id__in=[o.user_id for o in sources])
        .order_by("timestamp", "id")
        .values(
            "id", "actor", "action_type", "content_summary", "entities", "status", "timestamp", "conversation_id",
            "source_message_ids", "embedding", "embedder",
        )
    )  # fmt: skip
    original_ids = [row["id"] for row in originals]
    relations = list(
        EventRelation.objects.filter(source_id__in=original_ids).values_list("source_id", "target_id", "kind")
    )
    through = Entity.events.through
    links = list(through.objects.filter(event_id__in=original_ids).values_list("entity_id", "event_id"))
    entity_of: dict[int, int] = {}
    for old in Entity.objects.filter(id__in={entity_id for entity_id, _ in links}):
        row, _ = Entity.objects.get_or_create(
            user_id=owner.user_id, key=owner.key, normalized=old.normalized, type=old.type, defaults={"name": old.name}
        )
        entity_of[old.pk] = row.pk
    conversations = sorted({row["conversation_id"] for row in originals if row["conversation_id"]})
    base = np.asarray([row["embedding"] for row in originals], dtype=np.float32)
    noise = 0.5 / np.sqrt(base.shape[1])
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    span = max(row["timestamp"] for row in originals) - min(row["timestamp"] for row in originals)
    hashes: set[str] = set()
    started = time.perf_counter()
    made = copy = 0
    while made < size:
        new_conversations = Conversation.objects.bulk_create(
            [
                Conversation(tenant=tenant, agent=agent, user=user, model="gpt-4", title=f"copy {copy} of {pk}")
                for pk in conversations
            ]
        )
        conversation_of = {old: new.pk for old, new in zip(conversations, new_conversations, strict=True)}
        shift = (span + dt.timedelta(days=30)) * copy
        rows, numbers = [], []
        for number, row in enumerate(originals[: size - made]):
            text = row["content_summary"] if copy == 0 else _perturbed(row["content_summary"], rng)
            digest = store.text_hash(text)
            while digest in hashes:
                text += f" ({copy})"
                digest = store.text_hash(text)
            hashes.add(digest)
            vector = base[number] + (np_rng.normal(0, noise, base.shape[1]).astype(np.float32) if copy else 0)
            vector /= np.linalg.norm(vector)
            names = " ".join(entity["name"] for entity in row["entities"])
            when = row["timestamp"] + shift
            rows.append(
                Event(
                    tenant=tenant, user_id=owner.user_id, key=owner.key, agent_id=owner.agent_id,
                    event_id=f"evt_{when:%Y%m%d%H%M%S}_{made + number:06x}", timestamp=when, actor=row["actor"],
                    action_type=row["action_type"], content_summary=text, entities=row["entities"],
                    status=row["status"], content_hash=digest,
                    conversation_id=conversation_of.get(row["conversation_id"]),
                    source_message_ids=row["source_message_ids"], terms=store.stored_terms(f"{text} {names}".strip()),
                    embedding=tuple(float(v) for v in vector), embedder=row["embedder"],
                )
            )  # fmt: skip
            numbers.append(row["id"])
        created = Event.objects.bulk_create(rows, batch_size=1000)
        new_id = {old: event.pk for old, event in zip(numbers, created, strict=True)}
        EventRelation.objects.bulk_create(
            [
                EventRelation(tenant=tenant, source_id=new_id[s], target_id=new_id[t], kind=kind)
                for s, t, kind in relations
                if s in new_id and t in new_id
            ],
            batch_size=2000,
        )
        through.objects.bulk_create(
            [through(entity_id=entity_of[e], event_id=new_id[v]) for e, v in links if v in new_id], batch_size=2000
        )
        made += len(created)
        copy += 1
    elapsed = time.perf_counter() - started
    relation_count = EventRelation.objects.filter(source__user_id=owner.user_id).count()
    print(
        f"  {made} events for one user ({copy} copies of {len(originals)}), {relation_count} relations, "
        f"{len(entity_of)} entities, written in bulk in {elapsed:.1f} s",
        flush=True,
    )
    return target


def measure_latency(conversation, questions: list[str], rounds: int) -> None:
    from django.db import connection

    from knowledge.retrieval import clear_query_vectors
    from memory.longterm.recall import recall_for_turn as recall
    from memory.models import ConversationContext

    # As a turn calls it: with the conversation's context row, which the turn has read already.
    context = ConversationContext.objects.filter(conversation=conversation).first()

    def recall_for_turn(conversation, question):
        return recall(conversation, question, window=WINDOW["tokens"], context=context)

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")  # the tables as autovacuum keeps them (index-only counts)
    started = time.perf_counter()
    recalled = recall_for_turn(conversation, questions[0])
    print(f"  first call (builds the process's collections): {(time.perf_counter() - started) * 1000:.0f} ms")
    statements = []
    with connection.execute_wrapper(lambda execute, *args: statements.append(1) or execute(*args)):
        recall_for_turn(conversation, questions[1])
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"  {len(statements)} database statements per recall; {os.cpu_count()} CPUs, load average {load}")
    for label, fresh in (("question embedded each call", True), ("question's embedding cached", False)):
        times = []
        for _ in range(rounds):
            for question in questions:
                if fresh:
                    clear_query_vectors()
                else:
                    recall_for_turn(conversation, question)
                started = time.perf_counter()
                recalled = recall_for_turn(conversation, question)
                times.append((time.perf_counter() - started) * 1000)
        p95 = percentile(times, 95)
        print(
            f"  recall_for_turn, {label}: p50 {percentile(times, 50):5.1f} ms  p95 {p95:5.1f} ms  "
            f"(goal p95 < {GOAL_P95_MS:.0f} ms: {GOAL_P95_MS / p95:.2f}x; {len(times)} calls)"
        )
    print(f"  a recall gives {len(recalled.lines)} lines, e.g. {recalled.lines[0][:110] if recalled.lines else ''!r}")


# --- main ------------------------------------------------------------------------------------------------------------


def cache_models(path: Path) -> list[CachedEmbedder]:
    """Memory's local models (`store.embedders()`) served from an on-disk cache of vectors until `uncache_models`."""
    from knowledge import embedders
    from memory.longterm import store

    cached = [CachedEmbedder(model, path) for model in store.embedders()]
    for model in cached:
        setattr(embedders, f"_{model.kind}", model)
    return cached


def uncache_models(cached: list[CachedEmbedder]) -> None:
    from knowledge import embedders

    for model in cached:
        setattr(embedders, f"_{model.kind}", model.inner)


def main() -> None:
    parser = bench_parser(
        __doc__,
        smoke="each conversation cut to its first 2 sessions and up to 2 questions of each category whose evidence "
        "is there, vectors embedded with no cache, then 300 events for the cost on the reply path",
    )
    parser.add_argument("--database", default="sqlite", help="sqlite, postgres (127.0.0.1:5432, a bench db) or a URL")
    parser.add_argument("--events", type=int, default=10000, help="events of the latency test (0: skip it)")
    parser.add_argument("--rounds", type=int, default=1, help="timed passes over the questions")
    parser.add_argument("--per-sample", action="store_true", help="also a table per LoCoMo conversation")
    parser.add_argument("--data", type=Path, default=LOCOMO, help=f"conversations in LoCoMo's shape (default {LOCOMO})")
    parser.add_argument(
        "--set", choices=sorted(SETS), help="a named set where its builder writes it (instead of --data)"
    )
    parser.add_argument(
        "--tune", action="append", default=[], metavar="NAME=V1,V2",
        help="try values of a constant on each dev half (MEMORY_EVENTS_TOP_K=5,10; walk.HOP_SHARE=0.25,0.5)",
    )  # fmt: skip
    parser.add_argument(
        "--window", type=int, default=DEMO_WINDOW,
        help=f"the agent model's context window the recall budget is a share of (default {DEMO_WINDOW}; 0: unknown)",
    )  # fmt: skip
    parser.add_argument(
        "--shown-at", default="", metavar="B1,B2",
        help="also what the reply sees within these recall budgets (tokens), as columns shown@B",
    )  # fmt: skip
    parser.add_argument(
        "--const", action="append", default=[], metavar="NAME=V",
        help="set a constant before storing (rules.STATEMENT_CHARS=200; a MEMORY_* setting); repeatable",
    )  # fmt: skip
    parser.add_argument("--half", choices=("dev", "check"), help="only the conversations of this half of a split set")
    parser.add_argument("--keep", action="store_true", help="keep the PostgreSQL bench database")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "agentplat-memory-bench" / "vectors.sqlite3"))
    args = parser.parse_args()
    if args.smoke:
        args.events, args.rounds = 300, 1
        args.cache = str(Path(tempfile.mkdtemp(prefix="memory-smoke-")) / "vectors.sqlite3")
    if args.set:
        args.data = SETS[args.set]
        if args.smoke and args.set.startswith("memorybank") and not args.data.is_file():
            args.data = smoke_memorybank(args.set)
    require_data(args.data)
    WINDOW["tokens"] = args.window or None
    SHOWN_AT.extend(int(budget) for budget in args.shown_at.split(",") if budget)
    global COLUMNS  # the tables' columns grow by the budgets asked for
    COLUMNS = (*COLUMNS, *(f"shown@{budget}" for budget in SHOWN_AT))

    samples = load_locomo(args.data)
    if args.half:
        samples = [sample for sample in samples if sample.split == args.half]
    if args.smoke:
        samples = smoke_samples(samples)
    url = prepare_database(args.database)
    setup_django("memory-bench-")
    from django.db import connection, connections

    from tenants.models import Tenant
    from tenants.scope import tenant_scope

    print(f"database: {connection.vendor} ({url.split('@')[-1]}); data: {args.data.name}")
    print(
        "extraction: offline rules (mode 'rules'): one event per message, entities by rules, `follows` within a "
        "session and `refers_to` by a shared entity; no `causes`, no supersession, no `resolves` (those need the "
        "model)"
    )
    set_constants(args.const)
    tenant = Tenant.objects.create(name="memory bench", slug="memory-bench")
    try:
        with tenant_scope(tenant):
            cached = cache_models(Path(args.cache))
            owners = {}
            for sample in samples:
                started = time.perf_counter()
                _, _, owner, exchanges, alone = store_sample(tenant, sample)
                owners[sample.sample_id] = owner
                print(
                    f"  {sample.sample_id} ({' & '.join(sample.speakers)}, {len(sample.sessions)} sessions, "
                    f"{len(sample.turns)} turns, {len(sample.questions)} questions 1-4): "
                    + describe_graph(owner, exchanges, alone, time.perf_counter() - started),
                    flush=True,
                )
            by_category, by_sample, times = evaluate(samples, owners)
            print(f"  embeddings computed this run (not cached yet): {sum(model.computed for model in cached)}")
            uncache_models(cached)
            print_table(
                "per category", by_category, [*CATEGORIES, "all"],
                lambda key: f"{key} {CATEGORIES[key]}" if key in CATEGORIES else "overall 1-4",
            )  # fmt: skip
            print_table("walk-only questions (two or more evidence turns, one sharing no word with the question)",
                        by_category, ["walk-only"], lambda key: str(key))  # fmt: skip
            if args.per_sample:
                print_table("per conversation", by_sample, [s.sample_id for s in samples], str)
            print_halves(by_sample, samples)
            print_splits(by_sample, samples)
            print_goals(by_category)
            print("  mean ms per query: " + ", ".join(f"{method} {ms:.1f}" for method, ms in times.items()))
            for spec in args.tune:
                print(f"\ntuning on a split: {spec}", flush=True)
                tune(spec, samples, owners)
            if args.events:
                print(f"\ncost on the reply path ({connection.vendor}):")
                conversation = build_scale(tenant, list(owners.values()), args.events)
                questions = [question.text for sample in samples for question in sample.questions]
                measure_latency(conversation, questions, args.rounds)
    finally:
        if connection.vendor == "postgresql" and not args.keep:
            connections.close_all()
            _drop_database(url)
            print(f"dropped {url.rsplit('/', 1)[1]}")


if __name__ == "__main__":
    main()
