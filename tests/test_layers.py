"""The floors of docs/architecture.md are a contract that `make lint` enforces: this shows the project's own contract
(pyproject.toml [tool.importlinter]) refuses an upward import, and that the code as it is keeps it."""

from __future__ import annotations

import re
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


def _module(root: Path, dotted: str) -> Path:
    """The file of module `dotted` under `root` (packages created on the way); a root package, or a module that
    another named module made a package (knowledge.ingest), is its __init__."""
    *packages, last = dotted.split(".")
    directory = root
    for package in packages:
        directory = directory / package
        directory.mkdir(exist_ok=True)
        (directory / "__init__.py").touch()
        directory.with_suffix(".py").unlink(missing_ok=True)  # an empty module named earlier becomes the package
    if not packages or (directory / last).is_dir():
        (directory / last).mkdir(exist_ok=True)
        return directory / last / "__init__.py"
    return directory / f"{last}.py"


def _named_modules(contract: dict) -> list[str]:
    """The modules a contract names, so that the empty tree has them all."""
    names = [*contract.get("source_modules", []), *contract.get("forbidden_modules", [])]
    for container in contract.get("containers", []):
        names += [f"{container}.{part.strip()}" for layer in contract["layers"] for part in re.split(r"[|:]", layer)]
    return names


def _tree_with(tmp_path: Path, imports: dict[str, str]) -> Path:
    """Empty packages named like the project's apps (and the modules the contracts name), `imports` = {"plans":
    "chat"} making plans import chat, and the project's contracts copied beside them."""
    config = _contract()
    for name in [*config["root_packages"], *(n for contract in config["contracts"] for n in _named_modules(contract))]:
        _module(tmp_path, name).touch()
    for importer, imported in imports.items():
        path = _module(tmp_path, importer)
        (path.parent / "probe.py" if path.name == "__init__.py" else path).write_text(f"import {imported}\n")
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


def test_the_runtime_imports_no_runner_and_no_code_outside_a_pack_imports_one(tmp_path):
    result = _lint(_tree_with(tmp_path, {"agents.runtime": "agents.toolloop", "plans": "agents.packs"}))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "agents.runtime is not allowed to import agents.toolloop" in result.stdout
    assert "plans is not allowed to import agents.packs" in result.stdout
    (tmp_path / "down").mkdir()
    allowed = {"agents.toolloop": "agents.runtime", "agents.packs": "agents.frames"}
    assert _lint(_tree_with(tmp_path / "down", allowed)).returncode == 0


def test_long_term_memory_never_reaches_up_to_services_or_tasks(tmp_path):
    for n, imported in enumerate(("memory.services", "memory.tasks")):
        tree = tmp_path / str(n)
        tree.mkdir()
        result = _lint(_tree_with(tree, {"memory.longterm": imported}))
        assert result.returncode == 1 and f"memory.longterm -> {imported}" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {"memory.services": "memory.longterm", "memory.tasks": "memory.longterm"}
    assert _lint(_tree_with(tmp_path / "down", down)).returncode == 0


def test_the_model_files_never_import_the_embedders_registry_back(tmp_path):
    result = _lint(_tree_with(tmp_path, {"knowledge.minilm_onnx": "knowledge.embedders"}))
    assert result.returncode == 1 and "knowledge.minilm_onnx -> knowledge.embedders" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {"knowledge.retrieval": "knowledge.embedders", "knowledge.embedders": "knowledge.minilm_onnx"}
    assert _lint(_tree_with(tmp_path / "down", down)).returncode == 0


def test_the_tenant_scope_is_the_base_and_ingestion_never_imports_the_tasks_that_queue_it(tmp_path):
    upward = {
        "tenants.scope": "tenants.models",
        "tenants.models": "tenants.packs",
        "knowledge.ingest": "knowledge.tasks",
    }
    result = _lint(_tree_with(tmp_path, upward))
    assert result.returncode == 1, result.stdout + result.stderr
    for importer, imported in upward.items():
        assert f"{importer} is not allowed to import {imported}" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {"tenants.packs": "tenants.models", "tenants.models": "tenants.scope", "knowledge.tasks": "knowledge.ingest"}
    assert _lint(_tree_with(tmp_path / "down", down)).returncode == 0


def test_the_ingestion_parts_import_only_those_below_them(tmp_path):
    result = _lint(_tree_with(tmp_path, {"knowledge.ingest.claim": "knowledge.ingest.pipeline"}))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "knowledge.ingest.claim -> knowledge.ingest.pipeline" in result.stdout, result.stdout
    (tmp_path / "down").mkdir()
    down = {
        "knowledge.ingest.pipeline": "knowledge.ingest.claim",
        "knowledge.ingest.store": "knowledge.ingest.progress",
    }
    assert _lint(_tree_with(tmp_path / "down", down)).returncode == 0
