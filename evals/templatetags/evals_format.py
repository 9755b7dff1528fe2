"""How the evaluation pages write a pass rate and a run's version."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.translation import gettext as _

from evals.models import ExpectationKind

register = template.Library()


@register.filter
def percent(rate: float | None) -> str:
    """0.875 -> "88%"; None (nothing judged yet) -> "—"."""
    return "—" if rate is None else f"{rate:.0%}"


@register.filter
def version_name(run: Any) -> str:
    """A run's version as the pages name it: "v3", or "draft" (translated) for a run of the draft."""
    version = getattr(run, "version", None)
    return f"v{version.number}" if version is not None else _("draft")


# The field whose value a case's table shows after the expectation's kind.
_SHOWN = {"text": "“%s”", "pattern": "/%s/", "name": "%s", "source": "%s", "rubric": "%s"}


@register.filter
def describe(expectation: dict[str, Any]) -> str:
    """An expectation in one line, as a case's table shows it: its kind and its main value (“contains “Paris””)."""
    kind = expectation.get("kind", "")
    try:
        words = str(ExpectationKind(kind).label)
    except ValueError:
        words = kind
    for field, shape in _SHOWN.items():
        if expectation.get(field):
            value = str(expectation[field])
            return f"{words} {shape % (value[:80] + ('…' if len(value) > 80 else ''))}"
    return words


@register.filter
def kind_label(kind: str) -> str:
    try:
        return str(ExpectationKind(kind).label)
    except ValueError:
        return kind


@register.filter
def change_label(change: str) -> str:
    """A compared case's change (evals.compare.Change) in words."""
    labels = {
        "fixed": _("fixed"),
        "broken": _("broken"),
        "same_pass": _("same (passes)"),
        "same_fail": _("same (fails)"),
        "only_a": _("only in A"),
        "only_b": _("only in B"),
    }
    return str(labels.get(str(change), change))
