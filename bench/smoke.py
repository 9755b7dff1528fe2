"""Every benchmark's --smoke run, one after the other, each with its wall time: what CI runs after the tests
(.ci/run, `make bench-smoke`), so that a change which breaks a benchmark fails there, not at its next run by hand.

    .venv/bin/python bench/smoke.py                          # all of them
    .venv/bin/python bench/smoke.py load_ws kb_retrieval     # some
    .venv/bin/python bench/smoke.py --redis-url redis://127.0.0.1:6379/13 --database-url postgres://...

A smoke is a benchmark at the smallest size that still goes through its whole path and prints its figures and its
ratio line (each one's --help says what its --smoke runs); the figures mean nothing at that size. A smoke fails
when its benchmark exits non-zero: an exception, or what the benchmark counts instead of raising (a refused turn,
a failed request or document), which a smoke turns into an error. Every smoke runs, then the table of their times
is printed, and the runner exits 1 if one failed.

The benchmarks run without the caller's DATABASE_URL, REDIS_URL and DJANGO_* settings (CI's, for its tests): on
throwaway SQLite databases, each a copy of one migrated here first, except where the service is what is measured:
load_ws and load_openai on --database-url and --redis-url, kb_retrieval on the pgvector server (--pgvector-url, a
database it drops and makes again).

Needs: `make install`; what the benchmarks need (each one's --help): PostgreSQL at --database-url (the role needs
CREATEDB) and Redis at --redis-url for load_ws and load_openai; the pgvector server (scripts/pgvector-server start)
for kb_retrieval; the data sets in ../shared/data; Debian's chromium and fonts-noto-cjk for screens/take.py (`make
browser-deps`). Without one, that benchmark's smoke fails saying what to do, and the others still run. CI has no copy
of REALTALK: realtalk_build's smoke converts a made-up sample in its layout (--realtalk gives a copy); nor of
MemoryBank: memorybank_build's smoke and memory_recall's memorybank-zh smoke read the committed made-up sample
bench/data/memorybank_sample/; nor of LongMemEval: ualong_build's smoke adds bench/data/ualong_sample/.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BASE_DIR, DATA_DIR, SQLITE_TEMPLATE, bench_parser

DEFAULT_DATABASE_URL = "postgres://agentplat@127.0.0.1:5432/agentplat_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
DEFAULT_PGVECTOR_URL = "postgres://postgres@127.0.0.1:5433/kb_smoke"
# The caller's services and settings, which the benchmarks must not pick up.
CLEARED = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "REQUIRE_SERVICES", "REQUIRE_PGVECTOR")


def smokes(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each benchmark's smoke command line (arguments of the Python interpreter), by name."""
    services = ["--database-url", args.database_url, "--redis-url", args.redis_url]
    return {
        "attachments": ["bench/attachments.py", "--smoke"],
        "context_window": ["bench/context_window.py", "--smoke"],
        "data/ocr/make": ["bench/data/ocr/make.py", "--smoke"],
        "eval_run": ["bench/eval_run.py", "--smoke"],
        "kb_retrieval": ["bench/kb_retrieval.py", "--smoke", "--database", args.pgvector_url],
        "llm_overhead": ["bench/llm_overhead.py", "--smoke"],
        "load_openai": ["bench/load_openai.py", "--smoke", *services],
        "load_ws": ["bench/load_ws.py", "--smoke", *services],
        "mcp_overhead": ["bench/mcp_overhead.py", "--smoke"],
        "memory_recall": ["bench/memory_recall.py", "--smoke", "--per-sample", "--tune", "MEMORY_EVENTS_TOP_K=5"],
        "memory_recall --set memorybank-zh": [
            "bench/memory_recall.py",
            "--smoke",
            "--set",
            "memorybank-zh",
            "--events",
            "0",
        ],
        "memorybank_build": ["bench/memorybank_build.py", "--smoke"],
        "realtalk_build": ["bench/realtalk_build.py", "--smoke", *([args.realtalk] if args.realtalk else [])],
        "screens/take": ["bench/screens/take.py", "--smoke"],
        "trace_overhead": ["bench/trace_overhead.py", "--smoke"],
        "trace_parts": ["bench/trace_parts.py", "--smoke"],
        "ualong_build": ["bench/ualong_build.py", "--smoke"],
    }


# The shared data sets the smokes read (../shared/data, BENCH_DATA_DIR elsewhere).
NEEDED = ("memory/locomo_dev.json", "kb/en_dbpedia/corpus.jsonl", "kb/zh_cmrc2018/corpus.jsonl")
TOPICS = [
    ("Solar panels", "太阳能板", "convert sunlight into electricity on a roof", "把屋顶上的阳光变成电"),
    ("Heat pumps", "热泵", "move heat from outside air into a house", "把室外空气的热量搬进房子"),
    ("Wind turbines", "风力发电机", "turn the wind's motion into power", "把风的运动变成电力"),
    ("Batteries", "电池", "store energy for the evening", "为晚上储存能量"),
    ("Insulation", "保温层", "keeps warmth inside in winter", "冬天把热量留在屋里"),
]


def _lines(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def _kb_set(folder: Path, chinese: bool, splits: tuple[str, ...]) -> None:
    """A made-up retrieval set in the BEIR layout: 60 documents, a query per topic with its one relevant document."""
    corpus, queries, qrels = [], [], ["query-id\tcorpus-id\tscore"]
    for n in range(60):
        title_en, title_zh, text_en, text_zh = TOPICS[n % len(TOPICS)]
        title, text = (title_zh, text_zh) if chinese else (title_en, text_en)
        corpus.append({"_id": f"d{n}", "title": f"{title} {n}", "text": f"{title} {text} (note {n})."})
    for n, (title_en, title_zh, _text_en, _text_zh) in enumerate(TOPICS):
        queries.append({"_id": f"q{n}", "text": (f"{title_zh}有什么用" if chinese else f"What do {title_en} do")})
        qrels.append(f"q{n}\td{n}\t1")
    _lines(folder / "corpus.jsonl", corpus)
    _lines(folder / "queries.jsonl", queries)
    for split in splits:
        (folder / "qrels" / f"{split}.tsv").parent.mkdir(parents=True, exist_ok=True)
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(qrels) + "\n", encoding="utf-8")


def _conversation(sample: int) -> dict:
    """A made-up conversation in LoCoMo's layout: three sessions of two speakers, questions with evidence ids."""
    conversation: dict = {"speaker_a": "Ada", "speaker_b": "Bo"}
    qa = []
    for session in range(1, 4):
        conversation[f"session_{session}_date_time"] = f"1:56 pm on {session + 7} May, 2023"
        turns = []
        for turn in range(1, 7):
            title, _zh, text, _text_zh = TOPICS[(sample + session + turn) % len(TOPICS)]
            speaker = "Ada" if turn % 2 else "Bo"
            turns.append(
                {
                    "speaker": speaker,
                    "dia_id": f"D{session}:{turn}",
                    "text": f"I read that {title.lower()} {text}; we might buy some in session {session}.",
                }
            )
        conversation[f"session_{session}"] = turns
        topic = TOPICS[(sample + session + 1) % len(TOPICS)][0].lower()
        for category in range(1, 5):  # LoCoMo's four: 1 multi-hop (two pieces of evidence), 2 temporal, 3, 4
            evidence = [f"D{session}:1", f"D{session}:3"] if category == 1 else [f"D{session}:{category}"]
            question = f"What did they say about {topic}?"
            qa.append({"question": question, "answer": "it", "evidence": evidence, "category": category})
    return {
        "sample_id": f"smoke-{sample}",
        "conversation": conversation,
        "qa": qa,
        "event_summary": {},
        "observation": {},
        "session_summary": {},
    }


def sample_data(folder: Path) -> Path:
    """Made-up data in the shared data sets' layouts, for a machine without them (a smoke checks the benchmark's
    path, not its figures)."""
    root = folder / "sample-data"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "locomo_dev.json").write_text(json.dumps([_conversation(0), _conversation(1)]), "utf-8")
    _kb_set(root / "kb" / "en_dbpedia", chinese=False, splits=("test",))
    _kb_set(root / "kb" / "zh_cmrc2018", chinese=True, splits=("dev", "trial"))
    return root


def environment(template: Path) -> dict[str, str]:
    cleared = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("DJANGO_")}
    return {**cleared, SQLITE_TEMPLATE: str(template), "PYTHONUNBUFFERED": "1"}


def migrate_template(folder: Path) -> Path:
    """One migrated SQLite database, which every smoke's throwaway database starts as a copy of."""
    template = folder / "template.sqlite3"
    env = {k: v for k, v in environment(template).items() if k != SQLITE_TEMPLATE}
    env.update(DATABASE_URL=f"sqlite:///{template}", DJANGO_DEBUG="1", LOG_LEVEL="WARNING")
    started = time.perf_counter()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=env, check=True)
    print(f"smoke: migrated the SQLite template in {time.perf_counter() - started:.1f} s", flush=True)
    return template


def run(command: list[str], env: dict[str, str], timeout: float) -> tuple[int | str, float]:
    """Run one smoke, its output passed through; (exit status or "timeout", seconds)."""
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, *command], cwd=BASE_DIR, env=env, start_new_session=True)  # noqa: S603
    try:
        status: int | str = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        status = "timeout"
        os.killpg(process.pid, signal.SIGINT)  # the benchmark's clean-up (its servers) runs on KeyboardInterrupt
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return status, time.perf_counter() - started


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("names", nargs="*", help="only these benchmarks (default: all)")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL, help="PostgreSQL of load_ws and load_openai")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="Redis of load_ws and load_openai")
    parser.add_argument("--pgvector-url", default=DEFAULT_PGVECTOR_URL, help="kb_retrieval's database (dropped)")
    parser.add_argument("--realtalk", help="a copy of github danny911kr/REALTALK for realtalk_build's smoke")
    parser.add_argument("--timeout", type=float, default=300, help="seconds one smoke may take")
    args = parser.parse_args()
    commands = smokes(args)
    unknown = sorted(set(args.names) - set(commands))
    if unknown:
        parser.error(f"no smoke named {', '.join(unknown)}: choose among {', '.join(commands)}")
    chosen = {name: command for name, command in commands.items() if not args.names or name in args.names}

    started = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-smoke-") as folder:
        env = environment(migrate_template(Path(folder)))
        missing = [name for name in NEEDED if not (DATA_DIR / name).exists()]
        if missing:
            env["BENCH_DATA_DIR"] = str(sample_data(Path(folder)))
            print(
                f"smoke: the shared data sets are not in {DATA_DIR} ({', '.join(missing)}): the smokes read a made-up "
                "sample in their layouts instead (set BENCH_DATA_DIR to a copy to use them)",
                flush=True,
            )
        for name, command in chosen.items():
            print(f"\n== smoke {name}: {' '.join(command)}", flush=True)
            status, seconds = run(command, env, args.timeout)
            results[name] = (status, seconds)
            verdict = "ok" if status == 0 else f"FAILED ({'timeout' if status == 'timeout' else f'exit {status}'})"
            print(f"-- smoke {name}: {verdict} in {seconds:.1f} s", flush=True)

    print("\nsmoke            seconds  result")
    for name, (status, seconds) in results.items():
        print(f"{name:16s} {seconds:7.1f}  {'ok' if status == 0 else 'FAILED'}")
    failed = [name for name, (status, _) in results.items() if status != 0]
    print(f"{'all':16s} {time.perf_counter() - started:7.1f}  {f'{len(failed)} FAILED' if failed else 'ok'}")
    if failed:
        raise SystemExit(f"bench: smoke failed: {', '.join(failed)} (output above)")


if __name__ == "__main__":
    main()
