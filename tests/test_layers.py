"""The floors of docs/architecture.md are a contract that `make lint` enforces: this shows the project's own contract
(pyproject.toml [tool.importlinter]) refuses an upward import, and that the code as it is keeps it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return '"' + str(value) + '"'


def _tree_with(tmp_path: Path, imports: dict[str, str]) -> Path:
    """Empty packages named like the project's apps, `imports` = {"plans": "chat"} making plans import chat, and the
    project's contract copied beside them."""
    config = _contract()
    for package in config["root_packages"]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for importer, imported in imports.items():
        (tmp_path / importer / "probe.py").write_text(f"import {imported}\n")
    lines = ["[tool.importlinter]"]
    lines += [f"{key} = {_toml(value)}" for key, value in config.items() if key != "contracts"]
    for contract in config["contracts"]:
        lines.append("\n[[tool.importlinter.contracts]]")
        lines += [f"{key} = {_toml(value)}" for key, value in contract.items()]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return tmp_path


def _lint(directory: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(directory / "pyproject.toml"), "--no-cache"],
        cwd=directory,
        env={"PYTHONPATH": str(directory), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_contract_refuses_an_upward_import(tmp_path):
    result = _lint(_tree_with(tmp_path, {"plans": "chat"}))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "plans is not allowed to import chat" in result.stdout


def test_knowledge_never_imports_memory_which_stands_on_it(tmp_path):
    result = _lint(_tree_with(tmp_path, {"knowledge": "memory"}))
    assert result.returncode == 1 and "knowledge is not allowed to import memory" in result.stdout
    (tmp_path / "down").mkdir()
    assert _lint(_tree_with(tmp_path / "down", {"memory": "knowledge"})).returncode == 0


def test_a_downward_import_is_allowed(tmp_path):
    result = _lint(_tree_with(tmp_path, {"chat": "plans", "agents": "memory", "llm": "tenants", "tenants": "core"}))
    assert result.returncode == 0, result.stdout + result.stderr
