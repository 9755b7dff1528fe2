"""Shared set-up for the benchmarks: Django on the configured database (a throwaway SQLite one by default), and the
checks that a benchmark's services, data and packages are there, each failing with what to do instead of a traceback.

Every benchmark's docstring has a "Needs:" paragraph, which its --help prints (`bench_parser`), and every benchmark
has a `--smoke` run, the smallest that goes through its whole path, which CI runs (bench/smoke.py).
"""

from __future__ import annotations

import argparse
import getpass
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import psycopg
import redis
from psycopg import sql

BASE_DIR = Path(__file__).resolve().parent.parent
# The shared benchmark data sets (../shared/data/README.md), read in place; BENCH_DATA_DIR points elsewhere.
DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR") or BASE_DIR.parent / "shared" / "data")
LOCAL_HOSTS = {"", "127.0.0.1", "localhost", "::1"}
# A migrated SQLite database that each throwaway one starts as a copy of (bench/smoke.py makes one for all its runs,
# so that each benchmark's migrate has nothing left to do).
SQLITE_TEMPLATE = "BENCH_SQLITE_TEMPLATE"


class Missing(SystemExit):
    """What a benchmark needs is not there: the message (printed on exit, status 1) says what and how to get it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"bench: {message}")


def needs(doc: str | None) -> str:
    """The "Needs:" paragraph of a benchmark's docstring."""
    for paragraph in (doc or "").split("\n\n"):
        if paragraph.lstrip().startswith("Needs:"):
            return paragraph.strip("\n")
    return ""


def bench_parser(
    doc: str | None, *, smoke: str | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """A benchmark's argument parser: its --help shows `description` (default: the whole docstring) and the
    docstring's "Needs:" paragraph; with `smoke` (what it runs), the benchmark's --smoke flag."""
    description = doc if description is None else description
    epilog = "" if needs(doc) in (description or "") else needs(doc)
    parser = argparse.ArgumentParser(
        description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if smoke is None:
        return parser
    parser.add_argument(
        "--smoke", action="store_true",
        help=f"a run of seconds that goes through the whole benchmark, as CI runs it (bench/smoke.py): {smoke}. "
        "Its figures mean nothing; it fails when something on the way did.",
    )  # fmt: skip
    return parser


def smoke_check(failures: Iterable[str]) -> None:
    """End a --smoke run with status 1 when something it counted instead of raising went wrong (a refused turn,
    a failed document...): a smoke is there to fail then."""
    failures = [failure for failure in failures if failure]
    if failures:
        raise SystemExit("bench: smoke run failed: " + "; ".join(failures))


def require_data(*paths: Path) -> None:
    """Exit saying which data files are missing and where the benchmarks look for them."""
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise Missing(
            f"missing benchmark data: {', '.join(missing)}. The benchmarks read the shared data sets in {DATA_DIR} "
            "(described in its README.md); set BENCH_DATA_DIR to where your copy is."
        )


def require_module(module: str, install: str) -> None:
    """Exit saying how to install a package the benchmark imports."""
    if importlib.util.find_spec(module) is None:
        raise Missing(f"the Python package {module} is not installed: {install}")


def require_redis(url: str) -> None:
    """Exit when Redis at `url` does not answer a PING."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Missing(
            f"Redis at {url} does not answer ({_one_line(exc)}).\nStart it (redis-server; Debian: apt-get install "
            "redis-server), or pass --redis-url / REDIS_URL."
        ) from None
    finally:
        client.close()


def ensure_postgres(url: str, *, fresh: bool = False) -> None:
    """Make the PostgreSQL database of `url` ready: created if missing (dropped first with `fresh`). A missing role
    on this machine's server is created through its `postgres` superuser when that can log in without a password
    (as .ci/run does); anything else exits saying what to do."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    name, role = params.get("dbname"), params.get("user") or getpass.getuser()
    where = f"{params.get('host') or 'the local socket'}:{params.get('port') or 5432}"
    if not name:
        raise Missing(f"the database URL {url} names no database: add /<name> at its end.")
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres", connect_timeout=5)
    try:
        connection = psycopg.connect(admin, autocommit=True)
    except psycopg.OperationalError as exc:
        if f'role "{role}" does not exist' not in str(exc):
            raise Missing(
                f"cannot connect to PostgreSQL at {where} as {role} ({_one_line(exc)}).\nStart PostgreSQL "
                "(for pgvector: scripts/pgvector-server start), or pass --database-url with a role that may create "
                "databases."
            ) from None
        _create_role(url, role, where)
        connection = psycopg.connect(admin, autocommit=True)
    with connection:
        if fresh:
            connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if not connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            print(f"bench: creating database {name} at {where}", file=sys.stderr, flush=True)
            try:
                connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            except psycopg.errors.InsufficientPrivilege:
                raise Missing(
                    f"the role {role} may not create databases at {where}: as a superuser run "
                    f"`ALTER ROLE {role} CREATEDB` or `createdb -O {role} {name}`."
                ) from None


def _create_role(url: str, role: str, where: str) -> None:
    """The role of the bench's database URL, created with LOGIN CREATEDB by the local server's superuser."""
    how = (
        f"PostgreSQL at {where} has no role {role}.\nCreate it as a superuser "
        f"(`createuser -h 127.0.0.1 -U postgres --createdb {role}`, or "
        f"`psql -U postgres -c 'CREATE ROLE {role} LOGIN CREATEDB'`), or pass --database-url with an existing role."
    )
    host = psycopg.conninfo.conninfo_to_dict(url).get("host") or ""
    if host not in LOCAL_HOSTS:
        raise Missing(how)
    superuser = psycopg.conninfo.make_conninfo(url, user="postgres", password="", dbname="postgres", connect_timeout=5)
    try:
        with psycopg.connect(superuser, autocommit=True) as connection:
            connection.execute(sql.SQL("CREATE ROLE {} LOGIN CREATEDB").format(sql.Identifier(role)))
    except psycopg.Error as exc:
        raise Missing(f"{how}\n(Creating it as postgres failed: {_one_line(exc)}.)") from None
    print(f"bench: created the PostgreSQL role {role} (LOGIN CREATEDB) at {where}", file=sys.stderr, flush=True)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()).rstrip(".")


def setup_django(prefix: str = "bench-") -> None:
    """Configure Django for a benchmark run and apply migrations."""
    if str(BASE_DIR) not in sys.path:
        sys.path.insert(0, str(BASE_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("LLM_ALLOW_PRIVATE_BASE_URLS", "1")  # the scripted model servers listen on 127.0.0.1
    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = sqlite_url(prefix)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def sqlite_url(prefix: str) -> str:
    """The URL of a throwaway SQLite database in a new temporary folder: empty, or a copy of the migrated database
    that BENCH_SQLITE_TEMPLATE names."""
    path = Path(tempfile.mkdtemp(prefix=prefix)) / "bench.sqlite3"
    if os.environ.get(SQLITE_TEMPLATE):
        shutil.copyfile(os.environ[SQLITE_TEMPLATE], path)
    return f"sqlite:///{path}"
