"""The words of progress, declared once: a tool call's line, a workflow step's line and a plan step's status, in
the active language. The chat page (live and after a reload), the widget and the plan log all say them so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from agents.tools import get_tool
from agents.workflows.schema import step_type_labels


def tool_status_labels() -> dict[str, str]:
    """A tool call's progress line by its outcome, in the active language (%(name)s: the tool's label)."""
    return {
        "started": _("Tool “%(name)s” running…"),
        "completed": _("Tool “%(name)s” finished"),
        "failed": _("Tool “%(name)s” failed"),
        "interrupted": _("Tool “%(name)s” asked you a question"),
    }


def workflow_step_line_labels() -> dict[str, str]:
    """A workflow step's progress line by its outcome (%(name)s: the step type's or its tool's label)."""
    return {
        "started": _("Step “%(name)s” running…"),
        "completed": _("Step “%(name)s” finished"),
        "failed": _("Step “%(name)s” failed"),
        "interrupted": _("Step “%(name)s” is waiting for your answer"),
    }


def step_status_labels() -> dict[str, str]:
    """A plan step's badge (and a plan's status) by its status, in the active language (interrupted: it waits for
    the user)."""
    return {
        "not_started": _("not started"),
        "in_progress": _("in progress"),
        "running": _("in progress"),
        "completed": _("completed"),
        "interrupted": _("Waiting for your answer"),
        "failed": _("failed"),
        "stopped": _("stopped"),
    }


def line_status(status: str) -> str:
    """A frame's status as one of the lines' four (what static/js/chat.js's toolStatus does)."""
    if status in ("failed", "error"):
        return "failed"
    if status == "interrupted":
        return "interrupted"
    if status in ("completed", "finished", "done"):
        return "completed"
    return "started"


@dataclass(frozen=True)
class ProgressLine:
    """One tool call or workflow step as its line: named by its label, never by its identifier."""

    name: str
    status: str = "started"
    step_type: str = ""
    tool: str = ""
    # Labels of tools the registry does not hold (a tenant's MCP tools: agents.tools.tool_labels(tenant=...)).
    known: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def _tool_label(self, name: str) -> str | None:
        if name in self.known:
            return self.known[name]
        tool = get_tool(name)
        return tool.label() if tool is not None else None

    @property
    def known_label(self) -> str | None:
        """The tool's label, or for a workflow step its tool's label, else its step type's; None for a name no
        registry knows (a planner's own tools)."""
        if self.step_type:
            label = self._tool_label(self.tool) if self.tool else None
            return label or step_type_labels().get(self.step_type)
        return self._tool_label(self.name)

    @property
    def label(self) -> str:
        return self.known_label or self.name

    def _words(self) -> str:
        labels = workflow_step_line_labels() if self.step_type else tool_status_labels()
        return labels[line_status(self.status)]

    @property
    def text(self) -> str:
        return self._words() % {"name": self.label}

    def html(self) -> SafeString:
        """The line as HTML: a name without a label is shown as the identifier it is (code)."""
        label = self.known_label
        name = escape(label) if label else format_html("<code>{}</code>", self.name)
        return mark_safe(escape(self._words()) % {"name": name})  # noqa: S308 - escaped just above

    def label_html(self) -> SafeString:
        """The label as HTML, or the identifier as code when there is none."""
        label = self.known_label
        return format_html("{}", label) if label else format_html("<code>{}</code>", self.name)
