"""The project's own source files, parsed: what the guard tests (frames, chat messages) read."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def first_party_packages() -> list[Path]:
    """Every first-party package of the project (a Django app or config), so a new app is covered by itself."""
    return sorted(path.parent for path in ROOT.glob("*/__init__.py") if path.parent.name not in ("tests", "bench"))


def parsed_sources() -> Iterator[tuple[Path, ast.AST]]:
    """(path, syntax tree) of every module of those packages, migrations left out."""
    for package in first_party_packages():
        for path in sorted(package.rglob("*.py")):
            if "migrations" not in path.parts:
                yield path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
