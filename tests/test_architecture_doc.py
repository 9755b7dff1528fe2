"""docs/architecture.md says what pyproject.toml's import-linter contracts enforce, and nothing else: its floors table
is the floors contract's layers, every layers contract's order is written in it, no `a > b > c` chain in it (or in a
contract's name) contradicts a contract, and it does not number floors (the contract names them). Checked against
planted contradictions too, so the checks can fail. core stays free of Celery (config.celery hooks it up)."""

from __future__ import annotations

import ast
import itertools
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"

# A chain of names joined by " > " (or " < "), each a name or names side by side ("api | chat").
_NAME = r"[a-z_][a-z0-9_.]*"
_GROUP = rf"{_NAME}(?: \| {_NAME})*"
_CHAIN = re.compile(rf"(?<![\w.|])({_GROUP}(?: (?:>|<) {_GROUP})+)(?![\w.])")
_TABLE_ROW = re.compile(rf"^({_GROUP}) {{2,}}\S")
_NUMBERED_FLOOR = re.compile(r"\bfloor \d|\(\d½?:|\b(?:llm|tenants|memory|knowledge|agents|plans|chat|api) \(\d")


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]


def _layered(contracts: list[dict]) -> list[dict]:
    return [contract for contract in contracts if contract["type"] == "layers"]


def _floors(contracts: list[dict]) -> list[str]:
    (floors,) = [contract["layers"] for contract in _layered(contracts) if not contract.get("containers")]
    return floors


def _groups(layers: list[str]) -> dict[str, int]:
    """name -> its layer's place, counted from the top."""
    return {name.strip(): place for place, layer in enumerate(layers) for name in layer.split("|")}


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", ""))


def _floors_table(doc: str) -> list[str]:
    """The rows of the first code block after the heading "Read this first": a floor per unindented line."""
    section = doc.split("## Read this first", 1)[1]
    block = section.split("```", 2)[1]
    return [match.group(1) for line in block.splitlines() if (match := _TABLE_ROW.match(line))]


def _contradictions(text: str, contracts: list[dict]) -> list[str]:
    """The chains in `text` whose names all belong to one layers contract but whose order no such contract has."""
    orders = [_groups(contract["layers"]) for contract in _layered(contracts)]
    wrong = []
    for match in _CHAIN.finditer(_plain(text)):
        chain = match.group(1)
        downward = " > " in chain
        steps = [[name.strip() for name in group.split("|")] for group in re.split(r" [<>] ", chain)]
        if " > " in chain and " < " in chain:
            continue  # not a chain of floors (a comparison in prose)
        names = {name for step in steps for name in step}
        known = [order for order in orders if names <= order.keys()]
        if not known:
            continue
        if not any(_agrees(steps, order, downward) for order in known):
            wrong.append(chain)
    return wrong


def _agrees(steps: list[list[str]], order: dict[str, int], downward: bool) -> bool:
    places = [{order[name] for name in step} for step in steps]
    if any(len(place) != 1 for place in places):
        return False  # names side by side that the contract puts on different floors
    flat = [place.pop() for place in places]
    if not downward:
        flat.reverse()
    return all(upper < lower for upper, lower in itertools.pairwise(flat))


def test_the_floors_table_is_the_floors_contract():
    table = _floors_table(DOC.read_text(encoding="utf-8"))
    floors = _floors(_contracts())
    assert table == floors, (
        f"docs/architecture.md's floors (Read this first) are {table}; pyproject.toml's floors contract has {floors}"
    )


def test_every_layers_contract_is_written_in_the_doc():
    doc = _plain(DOC.read_text(encoding="utf-8"))
    missing = [
        " > ".join(contract["layers"])
        for contract in _layered(_contracts())
        if " > ".join(contract["layers"]) not in doc
    ]
    assert not missing, f"docs/architecture.md does not state these contracts' orders: {missing}"


def test_no_chain_in_the_doc_or_the_contract_names_contradicts_a_contract():
    contracts = _contracts()
    names = "\n".join(contract["name"] for contract in contracts)
    wrong = _contradictions(DOC.read_text(encoding="utf-8"), contracts) + _contradictions(names, contracts)
    assert not wrong, f"chains of floors that contradict pyproject.toml's contracts: {wrong}"


def test_the_doc_names_floors_instead_of_numbering_them():
    doc = DOC.read_text(encoding="utf-8")
    numbered = [line.strip() for line in doc.splitlines() if _NUMBERED_FLOOR.search(line)]
    assert not numbered, f"floors numbered in docs/architecture.md (name them: the agents floor): {numbered}"


@pytest.mark.parametrize(
    ("planted", "found"),
    [
        ("config > api > chat > plans", ["config > api > chat > plans"]),  # api and chat are side by side
        ("the order tenants > llm > core", ["tenants > llm > core"]),
        ("core < llm < tenants", ["core < llm < tenants"]),
        ("engine: turns > sinks > bus > streams", ["turns > sinks > bus > streams"]),
        ("`agents` > `memory` > `knowledge | toolservers` > llm", []),
        ("core < tenants < llm < knowledge | toolservers", []),
    ],
)
def test_a_contradicting_chain_is_found(planted, found):
    assert _contradictions(planted, _contracts()) == found


def test_a_table_that_differs_from_the_contract_is_found():
    doc = DOC.read_text(encoding="utf-8")
    table = _floors_table(doc)
    swapped = doc.replace("\nllm  ", "\nllmx ", 1)
    assert _floors_table(swapped) != table
    assert "api | chat" in table


def test_a_numbered_floor_is_found():
    assert _NUMBERED_FLOOR.search("- `memory/` (floor 2): Conversation")
    assert _NUMBERED_FLOOR.search("knowledge (2) < memory (2½) < agents (3)")
    assert not _NUMBERED_FLOOR.search("the agents floor, one floor above api | chat")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_imports_no_celery():
    """core is the floor every package stands on; Celery's hookups are config's (config/celery.py)."""
    found = {
        str(path.relative_to(ROOT)): sorted(name for name in _imports(path) if name.split(".")[0] == "celery")
        for path in (ROOT / "core").rglob("*.py")
    }
    assert not {path: names for path, names in found.items() if names}, found
