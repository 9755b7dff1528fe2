"""Shared set-up for the benchmarks: Django on the configured database (a throwaway SQLite one by default)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = BASE_DIR.parent / "shared" / "data"


def setup_django(prefix: str = "bench-") -> None:
    """Configure Django for a benchmark run and apply migrations."""
    if str(BASE_DIR) not in sys.path:
        sys.path.insert(0, str(BASE_DIR))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("LLM_ALLOW_PRIVATE_BASE_URLS", "1")  # the scripted model servers listen on 127.0.0.1
    if "DATABASE_URL" not in os.environ:
        os.environ["DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp(prefix=prefix)}/bench.sqlite3"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
