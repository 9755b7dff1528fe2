"""Properties checked with Hypothesis over generated input: the workflow parser answers every document with a
workflow or a list of problems (never another exception: a 500 on the pages), agent import likewise, and the chunker
loses no text (the strategies' invariants are in tests/memory/test_overflow.py)."""

from __future__ import annotations

import re

import hypothesis
import pytest
from hypothesis import strategies as st

from agents.export import AgentImportError, agent_import
from agents.workflows.schema import WorkflowValidationError, parse_workflow
from knowledge.chunking import chunk_text
from llm.tokens import count_text

STEP_TYPES = st.sampled_from(["input", "plugin", "llm", "custom", "output", "ask", "nope", ""])
SCALARS = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
# YAML-ish documents: structured ones (the parser's real work) and arbitrary text (its error paths).
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
STEPS = st.lists(
    st.fixed_dictionaries(
        {"id": st.text(max_size=10), "type": STEP_TYPES},
        optional={
            "output": VALUES,
            "outputs": VALUES,
            "inputs": VALUES,
            "plugin": st.text(max_size=12),
            "function": st.text(max_size=12),
            "prompt": st.text(max_size=30),
        },
    ),
    max_size=5,
)
DOCUMENTS = st.fixed_dictionaries(
    {}, optional={"version": st.sampled_from(["1.0", "2", 1]), "name": SCALARS, "steps": STEPS | VALUES}
)


def _yaml(data: object) -> str:
    import yaml

    return yaml.safe_dump(data, allow_unicode=True)


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(text=st.one_of(DOCUMENTS.map(_yaml), st.text(max_size=300)))
def test_the_workflow_parser_answers_every_document_with_a_workflow_or_its_problems(text):
    try:
        parse_workflow(text, check_names=False)
    except WorkflowValidationError as error:
        assert error.errors and all(str(issue).strip() for issue in error.errors)


@pytest.mark.django_db
@hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(text=st.one_of(st.text(max_size=200), VALUES.map(_yaml),
                                 st.fixed_dictionaries({"format": st.just("agent-platform/agent"),
                                                        "agent": VALUES}).map(_yaml)))  # fmt: skip
def test_agent_import_answers_every_file_with_an_agent_or_its_problems(text, tenant):
    from django.db import transaction

    from tenants.scope import tenant_scope

    with tenant_scope(tenant):
        try:
            with transaction.atomic():
                agent_import(tenant=tenant, text=text)
                transaction.set_rollback(True)
        except AgentImportError as error:
            assert error.errors


def _is_subsequence(needle: str, haystack: str) -> bool:
    letters = iter(haystack)
    return all(letter in letters for letter in needle)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    text=st.text(alphabet=st.sampled_from(list("光伏电站逆变器。，！？abc XYZ.,!?\n0123")), min_size=1, max_size=600),
    size=st.integers(min_value=8, max_value=120),
    overlap=st.integers(min_value=0, max_value=40),
)
# Found in CI: the packed units' counts add up to 16, the joined text is 17 tokens.
@hypothesis.example(text="电光？.aY逆c1001b0光,", size=16, overlap=36)
def test_the_chunker_loses_no_text(text, size, overlap):
    chunks = chunk_text(text, chunk_size=size, chunk_overlap=overlap)
    squeeze = re.compile(r"\s+")
    original = squeeze.sub("", text)
    if original:
        assert chunks
    # In order and whole: the text is a subsequence of the chunks read one after another (overlaps repeat some).
    assert _is_subsequence(original, squeeze.sub("", "".join(chunks)))
    assert all(count_text(chunk) <= size for chunk in chunks)
