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
of REALTALK: realtalk_build's smoke converts a made-up sample in its layout (--realtalk gives a copy).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BASE_DIR, SQLITE_TEMPLATE, bench_parser

DEFAULT_DATABASE_URL = "postgres://agentplat@127.0.0.1:5432/agentplat_bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
DEFAULT_PGVECTOR_URL = "postgres://postgres@127.0.0.1:5433/kb_smoke"
# The caller's services and settings, which the benchmarks must not pick up.
CLEARED = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "REQUIRE_SERVICES", "REQUIRE_PGVECTOR")


def smokes(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each benchmark's smoke command line (arguments of the Python interpreter), by name."""
    services = ["--database-url", args.database_url, "--redis-url", args.redis_url]
    return {
        "context_window": ["bench/context_window.py", "--smoke"],
        "kb_retrieval": ["bench/kb_retrieval.py", "--smoke", "--database", args.pgvector_url],
        "llm_overhead": ["bench/llm_overhead.py", "--smoke"],
        "load_openai": ["bench/load_openai.py", "--smoke", *services],
        "load_ws": ["bench/load_ws.py", "--smoke", *services],
        "mcp_overhead": ["bench/mcp_overhead.py", "--smoke"],
        "memory_recall": ["bench/memory_recall.py", "--smoke", "--per-sample", "--tune", "MEMORY_EVENTS_TOP_K=5"],
        "realtalk_build": ["bench/realtalk_build.py", "--smoke", *([args.realtalk] if args.realtalk else [])],
        "screens/take": ["bench/screens/take.py", "--smoke"],
        "trace_overhead": ["bench/trace_overhead.py", "--smoke"],
        "trace_parts": ["bench/trace_parts.py", "--smoke"],
    }


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
