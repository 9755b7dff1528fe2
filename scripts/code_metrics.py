#!/usr/bin/env python3
"""The code's shape in figures: lines per package, functions over 80 lines, imports inside functions, import
cycles between the project's modules and the import-linter contracts. Tests and migrations are left out.

    .venv/bin/python scripts/code_metrics.py            # a table; --long lists the long functions, --imports
                                                        # the in-function imports, --cycles the cycles' modules
"""

from __future__ import annotations

import argparse
import ast
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The packages import-linter knows (pyproject.toml), so a new app is counted without touching this script.
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
LONG = 80


def _sources() -> list[Path]:
    files = []
    for package in PACKAGES:
        base = ROOT / package
        if base.is_dir():
            files += [p for p in base.rglob("*.py") if "migrations" not in p.parts]
    return sorted(files)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(tree: ast.AST, module: str, path: Path) -> list[tuple[str, bool, ast.AST]]:
    """(imported module, inside a function, node) for every import in the file."""
    found: list[tuple[str, bool, ast.AST]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function, child) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, path, child)
                found.extend((f"{target}.{alias.name}", in_function, child) for alias in child.names)
            walk(child, inside)

    walk(tree, False)
    return found


def _project_module(name: str, modules: set[str]) -> str | None:
    """The project module an imported name lives in (``pkg.mod.func`` -> ``pkg.mod``), or None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def measure() -> dict:
    files = _sources()
    modules = {_module_name(p) for p in files}
    lines: dict[str, int] = defaultdict(int)
    long_functions: list[tuple[str, str, int]] = []
    in_function: list[tuple[str, int, str]] = []
    graph: dict[str, set[str]] = defaultdict(set)
    for path in files:
        text = path.read_text()
        module = _module_name(path)
        lines[module.split(".")[0]] += text.count("\n")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > LONG:
                    long_functions.append((str(path.relative_to(ROOT)), node.name, length))
        for name, inside, node in _imports(tree, module, path):
            target = _project_module(name, modules)
            if target is not None and target != module:
                graph[module].add(target)
            if inside and target is not None:
                in_function.append((str(path.relative_to(ROOT)), node.lineno, target))
    with open(ROOT / "pyproject.toml", "rb") as handle:
        contracts = tomllib.load(handle).get("tool", {}).get("importlinter", {}).get("contracts", [])
    return {
        "lines": dict(lines),
        "long": sorted(long_functions, key=lambda row: -row[2]),
        "in_function": sorted(set(in_function)),
        "cycles": _cycles(graph),
        "contracts": [contract["name"] for contract in contracts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", action="store_true")
    parser.add_argument("--imports", action="store_true")
    parser.add_argument("--cycles", action="store_true")
    args = parser.parse_args()
    figures = measure()
    print("lines per package (without tests and migrations):")
    for package, count in sorted(figures["lines"].items(), key=lambda item: -item[1]):
        print(f"  {package:<10} {count:>6}")
    print(f"  {'total':<10} {sum(figures['lines'].values()):>6}")
    print(f"functions over {LONG} lines: {len(figures['long'])}")
    for path, name, length in figures["long"] if args.long else []:
        print(f"  {length:>4}  {path}::{name}")
    print(f"imports of the project's own modules inside functions: {len(figures['in_function'])}")
    for path, line, target in figures["in_function"] if args.imports else []:
        print(f"  {path}:{line}  {target}")
    print(f"import cycles between project modules: {len(figures['cycles'])}")
    for component in figures["cycles"] if args.cycles else []:
        print("  " + ", ".join(component))
    print(f"import-linter contracts: {len(figures['contracts'])}")


if __name__ == "__main__":
    main()
