"""Start-up refuses a missing registration (core.registry's required slots): the ASGI application and the Celery
worker do not start without the conversation page or the server-turn runner, instead of failing at run time."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.celery import refuse_missing_registrations
from plans import tasks

ROOT = Path(__file__).resolve().parents[2]

# The ASGI module as Daphne loads it, after Django set up the apps (whose ready() fill the slots) and, with "empty",
# after the slot the chat app fills was emptied again.
SCRIPT = """
import sys
import django
django.setup()
if sys.argv[1] == "empty":
    from memory import links
    links._page.clear()
import config.asgi
print("started")
"""


def _load_asgi(mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    env.update({"DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"})
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_the_asgi_application_refuses_to_start_without_the_conversation_page():
    started = _load_asgi("filled")
    assert started.returncode == 0 and started.stdout.strip() == "started", started.stderr[-2000:]
    refused = _load_asgi("empty")
    assert refused.returncode != 0 and "started" not in refused.stdout
    assert "ImproperlyConfigured: Nothing is registered as the conversation page (memory.links): the chat app" in (
        refused.stderr
    )


def test_a_worker_refuses_to_start_without_the_server_turn_runner():
    refuse_missing_registrations()
    with tasks._server_turn.restored() as slot:
        slot.clear()
        with pytest.raises(ImproperlyConfigured, match=r"the engine app \(engine\.apps\.EngineConfig\) registers it"):
            refuse_missing_registrations()
    refuse_missing_registrations()
