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


def _tree_with(tmp_path: Path, imports: dict[str, str], modules: tuple[str, ...] = ()) -> Path:
    """Empty packages named like the project's apps, `imports` = {"plans": "chat"} making plans import chat, and the
    project's contracts copied beside them. A contract inside an app (`containers`) names its modules: it is copied
    only when `modules` makes them (empty ones; "memory.longterm" is a package)."""
    config = _contract()
    for package in config["root_packages"]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for module in modules:
        parts = module.split(".")
        if module.endswith("longterm"):
            (tmp_path.joinpath(*parts)).mkdir()
            (tmp_path.joinpath(*parts) / "__init__.py").write_text("")
        else:
            tmp_path.joinpath(*parts[:-1], parts[-1] + ".py").write_text("")
    for importer, imported in imports.items():
        path = tmp_path.joinpath(*importer.split("."))
        path = path / "probe.py" if path.is_dir() else path.with_name(path.name + ".py")
        path.write_text(f"import {imported}\n")
    if not modules:
        config["contracts"] = [contract for contract in config["contracts"] if "containers" not in contract]
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


MEMORY = ("memory.services", "memory.tasks", "memory.longterm")
KNOWLEDGE = (
    "knowledge.ingest",
    "knowledge.retrieval",
    "knowledge.embedders",
    "knowledge.e5_onnx",
    "knowledge.minilm_onnx",
)


def test_long_term_memory_never_reaches_up_to_services_or_tasks(tmp_path):
    for n, imported in enumerate(("memory.services", "memory.tasks")):
        tree = tmp_path / str(n)
        tree.mkdir()
        result = _lint(_tree_with(tree, {"memory.longterm": imported}, MEMORY + KNOWLEDGE))
        assert result.returncode == 1 and f"memory.longterm.probe -> {imported}" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {"memory.services": "memory.longterm", "memory.tasks": "memory.longterm"}
    assert _lint(_tree_with(tmp_path / "down", down, MEMORY + KNOWLEDGE)).returncode == 0


def test_the_model_files_never_import_the_embedders_registry_back(tmp_path):
    result = _lint(_tree_with(tmp_path, {"knowledge.minilm_onnx": "knowledge.embedders"}, MEMORY + KNOWLEDGE))
    assert result.returncode == 1 and "knowledge.minilm_onnx -> knowledge.embedders" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {"knowledge.retrieval": "knowledge.embedders", "knowledge.embedders": "knowledge.minilm_onnx"}
    assert _lint(_tree_with(tmp_path / "down", down, MEMORY + KNOWLEDGE)).returncode == 0
