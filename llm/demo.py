"""The offline demo model: the script engine with llm/scripts/demo.yaml, answering in-process.

Used by `make run` when no OPENAI_API_KEY / OPENAI_BASE_URL is set; labelled everywhere as
"演示模型（离线脚本）/ Demo model (offline, scripted)". Importable without Django (the fake server uses it).
"""

from __future__ import annotations

import functools
from pathlib import Path

from llm.script import ScriptEngine, load_script

DEMO_SCRIPT_PATH = Path(__file__).resolve().parent / "scripts" / "demo.yaml"


@functools.cache
def demo_engine() -> ScriptEngine:
    """The process's demo script engine (loaded once)."""
    return ScriptEngine(load_script(DEMO_SCRIPT_PATH))
