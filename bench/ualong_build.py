"""Build the long user–assistant sets for bench/memory_recall.py (issue 38): each MemoryBank user's ten days with an
AI companion, with its probing questions and evidence, buried in real user–assistant chats with long answers, so
that a user's history is about 1,000-1,300 turns of which most is filler (the held-out set's shape: long histories
of one user with an assistant, 135-276 sessions, long turns, longer answers). English and Chinese.

    .venv/bin/python bench/memorybank_build.py /work/.mirror/zhongwanjun+MemoryBank-SiliconFriend/repo   # optional
    .venv/bin/python bench/ualong_build.py /work/.mirror/zhongwanjun+MemoryBank-SiliconFriend/repo \\
        "/work/.mirror/MuhammadNoor7+Parallel-Hybrid-Retrieval-Enhancing-Temporal-RAG-via-Concurrent-Graphiti-and-Semantic-Search/repo"
    .venv/bin/python bench/memory_recall.py --events 0 --per-sample --set ualong-en
    MEMORY_EMBEDDER=local_multilingual .venv/bin/python bench/memory_recall.py --events 0 --per-sample --set ualong-zh

The evidence-bearing part is MemoryBank-SiliconFriend (MIT) exactly as bench/memorybank_build.py converts it (its
functions, imported): each user's days as sessions with dia_ids D<day>:<n>, the same probing questions, evidence
dia_ids (its documented lexical rule), categories and split (users at odd places dev, the others check).

The filler is extra sessions of real chats between a user and an assistant, never evidence, with dia_ids
F<session>:<n> (session: the place of the session in the user's history), so they never collide with evidence:
  English: the haystack sessions of LongMemEval (Wu et al. 2024, arXiv 2410.10813, MIT licence) in a public copy of
     its longmemeval_s.json (github MuhammadNoor7/Parallel-Hybrid-...-Semantic-Search, commit 3d2d10e,
     data/longmemeval_s.json: 3 of its instances, 120 sessions). Only the sessions whose id starts with
     "sharegpt_" or "ultrachat_" are taken (real ShareGPT and UltraChat chats, the assistant's answers long), never
     LongMemEval's own (made-up) evidence sessions, deduplicated by id: 51 sessions, of which 6 open with the
     assistant (a ShareGPT chat cut mid-way) and lose those turns, one (a lone answer) is left empty: 50 sessions,
     384 turns. That is all this copy holds, so an English user's history is its ten days and all 50 sessions
     (418-488 turns), short of the 1,000 aimed at: a user gets no session twice.
  Chinese: CMRC 2018 (github ymcui/cmrc2018, CC BY-SA 4.0), read in place from ../shared/data/kb/zh_cmrc2018 (BEIR
     layout; BENCH_DATA_DIR elsewhere; never copied): a session is up to FILLER_QUESTIONS of the questions on one
     Wikipedia paragraph, asked by the user in turn, the assistant answering each with the question's gold answer
     and then the whole paragraph (long Chinese text; the gold answer first so that no two answers are the same
     text). 1,104 paragraphs, plenty.
Each user gets its own seeded shuffle of the filler (random.Random(SEED + the user's place)) and a turn target drawn
from TURNS (1,000-1,300); filler sessions are taken in that order until the history reaches the target, each put in
a random gap: the SPAN_DAYS before the user's first day, between two of its days, or the SPAN_DAYS after its last
one; a gap's sessions are dated evenly between its two ends (minutes), so the history stays in order of time and
the questions (asked the day after the last session) come after the filler too. Filler sessions repeat across users,
never within one. A filler session starting with the assistant loses its opening assistant turns (the bench takes
a session's first speaker for the user).

Two more sets, ualong_en_topic.json and ualong_zh_topic.json (`--set ualong-en-topic`, `--set ualong-zh-topic`): the
histories with questions written for this project instead of MemoryBank's (bench/data/ualong_topic_en.json and
ualong_topic_zh.json: 60 questions each, four a user, each an ordinary chat message about something the user said,
in other words than the user's: a topic link, which the lexical rule behind MemoryBank's evidence cannot make;
evidence read by hand).

Output in LoCoMo's shape (what memory_recall.load_locomo reads), each row with its `split`, to
~/.cache/agentplat-memory-bench/ualong_{en,zh}.json; sample_ids ul-en-01.., ul-zh-01..; a summary per user
(sessions, turns, mean characters of a user turn and of an assistant turn, questions).

Needs: `make install` (jieba, git); a copy of github zhongwanjun/MemoryBank-SiliconFriend (as for
bench/memorybank_build.py); the git directory of github MuhammadNoor7/Parallel-Hybrid-Retrieval-Enhancing-Temporal-
RAG-via-Concurrent-Graphiti-and-Semantic-Search (the `fetch` tool's) or its data/longmemeval_s.json extracted
(`git show 3d2d10e:data/longmemeval_s.json`); ../shared/data/kb/zh_cmrc2018 (--cmrc elsewhere). CI has none of them:
there `--smoke` builds from the committed made-up samples bench/data/memorybank_sample/ and bench/data/ualong_sample/
(written for this project), says so, and checks that bench/memory_recall.py loads the result.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memorybank_build as mb
from common import DATA_DIR, Missing, bench_parser, smoke_check

SAMPLE = Path(__file__).resolve().parent / "data" / "ualong_sample"
# Questions written for this project over each language's users, linked to what the user said by topic rather than
# by shared words (the held-out set's kind of question; MemoryBank's own are found by a lexical rule): the sets
# `ualong-en-topic` and `ualong-zh-topic`, the same histories as `ualong-en` / `ualong-zh` with these questions.
TOPIC_QUESTIONS = {
    mb.Language.EN: Path(__file__).resolve().parent / "data" / "ualong_topic_en.json",
    mb.Language.ZH: Path(__file__).resolve().parent / "data" / "ualong_topic_zh.json",
}
CMRC = DATA_DIR / "kb" / "zh_cmrc2018"
LONGMEMEVAL_COMMIT = "3d2d10e"  # the commit of the public copy that holds data/longmemeval_s.json
LONGMEMEVAL_PATH = "data/longmemeval_s.json"
REAL_CHATS = ("sharegpt_", "ultrachat_")  # LongMemEval's sessions taken from real chats (the rest are its own)
SEED = 38
TURNS = (1000, 1300)  # a user's history is drawn to about this many turns
SPAN_DAYS = 10  # filler before the first day and after the last one spans this many days
FILLER_QUESTIONS = 4  # a Chinese filler session asks at most this many questions on its paragraph
LOCOMO_TIME = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True)
class Filler:
    """One filler session: its source id and its turns as (role, text), role "user" or "assistant"."""

    source: str
    turns: tuple[tuple[str, str], ...]


def output_path(language: mb.Language, folder: Path = mb.CACHE, *, topic: bool = False) -> Path:
    """Where the built set is written (and where bench/memory_recall.py --set ualong-en|ualong-zh|ualong-en-topic|
    ualong-zh-topic reads it)."""
    return folder / f"ualong_{'en' if language is mb.Language.EN else 'zh'}{'_topic' if topic else ''}.json"


def sessions_of(conversation: dict) -> list[list[dict]]:
    """The turn lists of a LoCoMo-shaped conversation's `session_N` entries, in the order they are stored."""
    return [value for key, value in conversation.items() if re.fullmatch(r"session_\d+", key)]


def with_topic_questions(rows: list[dict], path: Path) -> tuple[list[dict], int]:
    """The users of `rows` that `path` asks about, each with those questions instead of MemoryBank's; a question
    whose evidence is not in the user's history (the made-up samples) is left out and counted."""
    asked: dict[str, list[dict]] = defaultdict(list)
    for item in json.loads(path.read_text(encoding="utf-8"))["questions"]:
        asked[item["user"]].append(item)
    out, dropped = [], 0
    for row in rows:
        said = {turn["dia_id"] for session in sessions_of(row["conversation"]) for turn in session}
        kept = [
            {"question": item["question"], "answer": "", "evidence": item["evidence"], "category": item["category"]}
            for item in asked.get(row["sample_id"], [])
            if set(item["evidence"]) <= said
        ]
        dropped += len(asked.get(row["sample_id"], [])) - len(kept)
        if kept:
            out.append({**row, "qa": kept})
    return out, dropped


def read_longmemeval(source: Path) -> list[Filler]:
    """LongMemEval's real-chat haystack sessions (ids sharegpt_* / ultrachat_*), each once, in the file's order."""
    if source.is_dir() and (source / "HEAD").is_file() and (source / "objects").is_dir():
        text = mb._git(source, "show", f"{LONGMEMEVAL_COMMIT}:{LONGMEMEVAL_PATH}")
    elif source.is_file():
        text = source.read_text(encoding="utf-8")
    else:
        raise Missing(
            f"no LongMemEval json at {source}: fetch github MuhammadNoor7/Parallel-Hybrid-Retrieval-Enhancing-"
            "Temporal-RAG-via-Concurrent-Graphiti-and-Semantic-Search and give its git directory, or the file "
            f"`git show {LONGMEMEVAL_COMMIT}:{LONGMEMEVAL_PATH}` writes"
        )
    sessions: dict[str, Filler] = {}
    for instance in json.loads(text):
        for session_id, turns in zip(instance["haystack_session_ids"], instance["haystack_sessions"], strict=True):
            if not session_id.startswith(REAL_CHATS) or session_id in sessions:
                continue
            kept = [(turn["role"], turn["content"].strip()) for turn in turns if turn.get("content", "").strip()]
            while kept and kept[0][0] != "user":  # the bench takes a session's first speaker for the user
                kept.pop(0)
            if kept:
                sessions[session_id] = Filler(session_id, tuple(kept))
    return list(sessions.values())


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def read_cmrc(folder: Path) -> list[Filler]:
    """CMRC 2018 as filler sessions: per paragraph, up to FILLER_QUESTIONS of its questions, each answered with the
    gold answer and the paragraph."""
    if not (folder / "corpus.jsonl").is_file():
        raise Missing(f"no CMRC 2018 in {folder} (corpus.jsonl, queries.jsonl, qrels/): give its folder with --cmrc")
    paragraphs = {row["_id"]: row["text"].strip() for row in _jsonl(folder / "corpus.jsonl")}
    queries = {row["_id"]: row for row in _jsonl(folder / "queries.jsonl")}
    asked: dict[str, list[dict]] = defaultdict(list)
    for qrels in sorted((folder / "qrels").glob("*.tsv")):
        for line in qrels.read_text(encoding="utf-8").splitlines()[1:]:
            query, paragraph, *_ = line.split("\t")
            if query in queries and paragraph in paragraphs:
                asked[paragraph].append(queries[query])
    sessions = []
    for paragraph, rows in asked.items():
        turns = []
        for row in rows[:FILLER_QUESTIONS]:
            answer = (row.get("answers") or [""])[0].strip()
            turns += [("user", row["text"].strip()), ("assistant", f"{answer}。{paragraphs[paragraph]}".lstrip("。"))]
        sessions.append(Filler(f"cmrc_{paragraph}", tuple(turns)))
    return sessions


def locomo_time(when: dt.datetime) -> str:
    """A datetime as LoCoMo's session time, "2:05 pm on 27 April, 2023"."""
    return f"{when.hour % 12 or 12}:{when:%M} {'am' if when.hour < 12 else 'pm'} on {when.day} {when:%B, %Y}"


def _gap_times(start: dt.datetime, end: dt.datetime, count: int) -> list[dt.datetime]:
    """`count` times evenly strictly between start and end, to the minute."""
    step = (end - start) / (count + 1)
    return [(start + step * (n + 1)).replace(second=0, microsecond=0) for n in range(count)]


def interleave(row: dict, filler: list[Filler], rng: random.Random, target: int) -> dict:
    """A MemoryBank row (from memorybank_build.convert) with filler sessions put before, between and after its days,
    until the history holds `target` turns or the filler runs out; sessions renumbered in order of time."""
    conversation = row["conversation"]
    days = sorted(
        (dt.datetime.strptime(conversation[f"{key}_date_time"], LOCOMO_TIME), conversation[key])
        for key in conversation
        if re.fullmatch(r"session_\d+", key)
    )
    turns = sum(len(day_turns) for _, day_turns in days)
    gaps: list[list[Filler]] = [[] for _ in range(len(days) + 1)]
    for session in rng.sample(filler, len(filler)):
        if turns >= target:
            break
        gaps[rng.randrange(len(gaps))].append(session)
        turns += len(session.turns)
    span = dt.timedelta(days=SPAN_DAYS)
    ends = [days[0][0] - span, *(when for when, _ in days), days[-1][0] + span]
    name, companion = conversation["speaker_a"], conversation["speaker_b"]
    out: dict = {"speaker_a": name, "speaker_b": companion}
    number = 0
    for place, gap in enumerate(gaps):
        for when, session in zip(_gap_times(ends[place], ends[place + 1], len(gap)), gap, strict=True):
            number += 1
            out[f"session_{number}"] = [
                {"speaker": name if role == "user" else companion, "dia_id": f"F{number}:{n}", "text": text}
                for n, (role, text) in enumerate(session.turns, start=1)
            ]
            out[f"session_{number}_date_time"] = locomo_time(when)
        if place < len(days):
            number += 1
            out[f"session_{number}"] = days[place][1]
            out[f"session_{number}_date_time"] = locomo_time(days[place][0])
    return {**row, "conversation": out}


def build(source: Path, filler: list[Filler], language: mb.Language, output: Path) -> list[dict]:
    """The long set of one language written to `output`; returns its rows."""
    users, questions = mb.read_source(source, language)
    rows = []
    prefix = "ul-en" if language is mb.Language.EN else "ul-zh"
    for number, (key, user) in enumerate(users.items(), start=1):
        name = (user.get("name") or key).strip()
        row, _, _ = mb.convert(number, {**user, "name": name}, questions.get(name, []), language)
        rng = random.Random(SEED + number)
        row = interleave(row, filler, rng, rng.randint(*TURNS))
        rows.append({**row, "sample_id": f"{prefix}-{number:02d}"})
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(rows, ensure_ascii=False, indent=0), encoding="utf-8")
    summarise(rows, output)
    if TOPIC_QUESTIONS[language].is_file():
        topic, dropped = with_topic_questions(rows, TOPIC_QUESTIONS[language])
        path = output_path(language, output.parent, topic=True)
        path.write_text(json.dumps(topic, ensure_ascii=False, indent=0), encoding="utf-8")
        print(f"{path.stem}: {sum(len(row['qa']) for row in topic)} topic questions on {len(topic)} users "
              f"({dropped} left out: their evidence is not in the history)")  # fmt: skip
    return rows


def summarise(rows: list[dict], output: Path) -> None:
    """Per user: sessions (filler), turns (filler), mean characters per user turn and per assistant turn, questions."""
    print(f"{'user':<9} {'split':<6} {'sessions':>8} {'filler':>6} {'turns':>6} {'filler':>6} {'user ch':>8} "
          f"{'asst ch':>8} {'questions':>9}")  # fmt: skip
    totals: dict[str, list] = defaultdict(list)
    for row in rows:
        conversation = row["conversation"]
        sessions = sessions_of(conversation)
        turns = [turn for session in sessions for turn in session]
        filler = [turn for turn in turns if turn["dia_id"].startswith("F")]
        user = [len(t["text"]) for t in turns if t["speaker"] == conversation["speaker_a"]]
        assistant = [len(t["text"]) for t in turns if t["speaker"] != conversation["speaker_a"]]
        filler_sessions = sum(session[0]["dia_id"].startswith("F") for session in sessions)
        print(f"{row['sample_id']:<9} {row['split']:<6} {len(sessions):>8} {filler_sessions:>6} {len(turns):>6} "
              f"{len(filler):>6} {statistics.mean(user):>8.0f} {statistics.mean(assistant or [0]):>8.0f} "
              f"{len(row['qa']):>9}")  # fmt: skip
        for key, value in (("sessions", len(sessions)), ("turns", len(turns)), ("questions", len(row["qa"]))):
            totals[key].append(value)
        totals["user"] += user
        totals["assistant"] += assistant
    user, assistant = statistics.mean(totals["user"]), statistics.mean(totals["assistant"])
    print(f"wrote {output}: {len(rows)} users, {sum(totals['questions'])} questions; sessions per user "
          f"{min(totals['sessions'])}-{max(totals['sessions'])}, turns per user {min(totals['turns'])}-"
          f"{max(totals['turns'])} (mean {statistics.mean(totals['turns']):.0f}); mean characters: user turn "
          f"{user:.0f}, assistant turn {assistant:.0f}")  # fmt: skip


def main() -> None:
    parser = bench_parser(
        __doc__,
        smoke="the committed made-up samples bench/data/memorybank_sample/ and bench/data/ualong_sample/, written "
        "to a temporary folder that bench/memory_recall.py then loads",
    )
    parser.add_argument("source", type=Path, nargs="?", help="a copy of github zhongwanjun/MemoryBank-SiliconFriend")
    parser.add_argument("longmemeval", type=Path, nargs="?", help="the LongMemEval copy's git directory, or its json")
    parser.add_argument("--cmrc", type=Path, default=CMRC, help=f"CMRC 2018 in the BEIR layout (default {CMRC})")
    parser.add_argument("--output-dir", type=Path, default=mb.CACHE, help=f"where to write (default {mb.CACHE})")
    args = parser.parse_args()
    if args.smoke:
        args.output_dir = Path(tempfile.mkdtemp(prefix="ualong-smoke-"))
        if args.source is None:
            args.source, args.longmemeval, args.cmrc = mb.SAMPLE, SAMPLE / "longmemeval_sample.json", SAMPLE / "cmrc"
            print(f"no copies given: building from the committed made-up samples ({mb.SAMPLE}, {SAMPLE})")
    elif args.source is None or args.longmemeval is None:
        parser.error("give the paths of a copy of MemoryBank-SiliconFriend and of the LongMemEval copy")
    failures = []
    for language in mb.Language:
        filler = read_longmemeval(args.longmemeval) if language is mb.Language.EN else read_cmrc(args.cmrc)
        print(f"{output_path(language).stem}: {len(filler)} filler sessions, {sum(len(f.turns) for f in filler)} turns")
        path = output_path(language, args.output_dir)
        build(args.source, filler, language, path)
        if args.smoke:
            failures.append(mb._loads(path))
    smoke_check(failures)


if __name__ == "__main__":
    main()
