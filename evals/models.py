"""Evaluation (issue 39): an agent's datasets of cases, runs of a dataset against a version (the draft or a published
one), each case's result, and the agent's optional publish gate.

A case is one or several user turns and what the reply to the last one must show (its expectations, each a dict
with a `kind` of ExpectationKind and that kind's fields; evals.expectations checks them). A run starts its own
conversations (source "eval", long-term memory off), never a user's, through the engine's one admission.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from core.bounded import unstorable_at, unstorable_message
from tenants.models import TenantOwned


def _storable(row: models.Model, names: tuple[str, ...]) -> None:
    """ValidationError for each of `names` (text or JSON) holding a NUL character or a lone surrogate, which PostgreSQL
    cannot store (SQLite would, so a database change must not be what finds it)."""
    errors = {}
    for name in names:
        where = unstorable_at(getattr(row, name), name)
        if where:
            errors[name] = unstorable_message(where)
    if errors:
        raise ValidationError(errors)


class ExpectationKind(models.TextChoices):
    """What a case expects of the reply. Fields per kind (in the expectation's dict besides `kind`):
    contains / not_contains / equals: `text`, optional `ignore_case` (default true for contains and not_contains);
    matches: `pattern` (a Python regular expression, searched); json_schema: `schema` (a JSON Schema; the reply,
    or its first ```json block, must be valid JSON for it); tool_called: `name`, optional `arguments` (a dict the
    call's arguments must contain); cited: optional `source` (a knowledge source's name; any citation without it);
    refusal / question: no fields (the reply declines / asks the user something back); rubric: `rubric` (what a
    good reply does), optional `min_score` (1-5, default 4), scored by the judge model."""

    CONTAINS = "contains", _("contains")
    NOT_CONTAINS = "not_contains", _("does not contain")
    EQUALS = "equals", _("equals")
    MATCHES = "matches", _("matches a pattern")
    JSON_SCHEMA = "json_schema", _("valid JSON for a schema")
    TOOL_CALLED = "tool_called", _("calls a tool")
    CITED = "cited", _("cites a knowledge source")
    REFUSAL = "refusal", _("declines")
    QUESTION = "question", _("asks back")
    RUBRIC = "rubric", _("rubric (judge model)")


# A rubric's score, as the judge gives it.
MIN_SCORE, MAX_SCORE = 1, 5


class CaseSource(models.TextChoices):
    MANUAL = "manual", _("written by hand")
    IMPORT = "import", _("imported")
    FEEDBACK = "feedback", _("from a 👎 reply")


class Dataset(TenantOwned):
    """An agent's set of cases, with the prompt its judge model scores rubrics by (shown and editable)."""

    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="eval_datasets", verbose_name=_("agent")
    )
    name = models.CharField(_("name"), max_length=100)
    description = models.TextField(_("description"), blank=True)
    judge_prompt = models.TextField(
        _("judge prompt"),
        blank=True,
        help_text=_("How the judge model scores a rubric. Empty: the default prompt."),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("created by"),
    )  # fmt: skip
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("evaluation dataset")
        verbose_name_plural = _("evaluation datasets")
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="evals_dataset_name_per_agent")]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        _storable(self, ("name", "description", "judge_prompt"))


class Case(TenantOwned):
    """One case: the user turns sent in order (`turns`, a list of strings) and the expectations on the reply to the
    last one (`expectations`, a list of dicts, see ExpectationKind)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="cases", verbose_name=_("dataset"))
    position = models.PositiveIntegerField(_("position"), default=0)
    title = models.CharField(_("title"), max_length=200, blank=True)
    turns = models.JSONField(_("user turns"), default=list)
    expectations = models.JSONField(_("expectations"), default=list)
    source = models.CharField(_("source"), max_length=10, choices=CaseSource.choices, default=CaseSource.MANUAL)
    # The 👎 rating it was made from (its comment is the rubric); kept when the rating is deleted.
    feedback = models.ForeignKey(
        "memory.Feedback", on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_cases",
        verbose_name=_("feedback"),
    )  # fmt: skip
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["dataset", "position", "id"]
        verbose_name = _("evaluation case")
        verbose_name_plural = _("evaluation cases")

    def __str__(self) -> str:
        return self.title or (self.turns[-1][:80] if self.turns else "")

    def clean(self) -> None:
        _storable(self, ("title", "turns", "expectations"))


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    DONE = "done", _("done")
    STOPPED = "stopped", _("stopped")
    FAILED = "failed", _("failed")


class Run(TenantOwned):
    """A dataset run against one version of its agent (`version`; None: the draft as it was when the run started,
    kept in `snapshot`). Counters move as cases finish; `stop_requested` ends it after the cases under way."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="runs", verbose_name=_("dataset"))
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, related_name="eval_runs", verbose_name=_("agent")
    )
    version = models.ForeignKey(
        "agents.AgentVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="eval_runs",
        verbose_name=_("version"), help_text=_("Empty: the draft."),
    )  # fmt: skip
    snapshot = models.JSONField(_("configuration run"), default=dict, blank=True)
    status = models.CharField(_("status"), max_length=10, choices=RunStatus.choices, default=RunStatus.QUEUED)
    concurrency = models.PositiveSmallIntegerField(_("cases at once"), default=4)
    total = models.PositiveIntegerField(_("cases"), default=0)
    done = models.PositiveIntegerField(_("cases done"), default=0)
    passed = models.PositiveIntegerField(_("passed"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    errored = models.PositiveIntegerField(_("errors"), default=0)
    tokens = models.PositiveBigIntegerField(_("tokens"), default=0)
    judge_tokens = models.PositiveBigIntegerField(_("judge tokens"), default=0)
    stop_requested = models.BooleanField(_("stop requested"), default=False)
    error = models.TextField(_("why it ended"), blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("started by"),
    )  # fmt: skip
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("evaluation run")
        verbose_name_plural = _("evaluation runs")
        indexes = [models.Index(fields=["tenant", "agent", "version", "-id"], name="evals_run_latest")]

    def __str__(self) -> str:
        return f"{self.dataset} #{self.pk}"

    @property
    def pass_rate(self) -> float | None:
        """Passed over the cases judged (passed + failed + errors); None before any."""
        judged = self.passed + self.failed + self.errored
        return self.passed / judged if judged else None

    @property
    def finished(self) -> bool:
        return self.status in (RunStatus.DONE, RunStatus.STOPPED, RunStatus.FAILED)


class ResultStatus(models.TextChoices):
    PASSED = "passed", _("passed")
    FAILED = "failed", _("failed")
    ERROR = "error", _("error")


class CaseResult(TenantOwned):
    """One case of a run: the reply, each expectation's verdict (`verdicts`: a list of {"kind", "passed", "detail"}
    in the case's order), tokens, latency and the conversation the turn ran in."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="results", verbose_name=_("run"))
    case = models.ForeignKey(
        Case, on_delete=models.SET_NULL, null=True, blank=True, related_name="results", verbose_name=_("case")
    )
    position = models.PositiveIntegerField(_("position"), default=0)
    title = models.CharField(_("title"), max_length=200, blank=True)
    status = models.CharField(_("status"), max_length=10, choices=ResultStatus.choices)
    reply = models.TextField(_("reply"), blank=True)
    verdicts = models.JSONField(_("verdicts"), default=list)
    tokens_in = models.PositiveIntegerField(_("prompt tokens"), default=0)
    tokens_out = models.PositiveIntegerField(_("reply tokens"), default=0)
    judge_tokens = models.PositiveIntegerField(_("judge tokens"), default=0)
    latency_ms = models.PositiveIntegerField(_("latency (ms)"), default=0)
    conversation = models.ForeignKey(
        "memory.Conversation", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        verbose_name=_("conversation"),
    )  # fmt: skip
    trace_id = models.CharField(_("trace"), max_length=32, blank=True)
    error = models.TextField(_("error"), blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["run", "position", "id"]
        verbose_name = _("case result")
        verbose_name_plural = _("case results")
        constraints = [models.UniqueConstraint(fields=["run", "case"], name="evals_result_once_per_case")]

    def __str__(self) -> str:
        return f"{self.run_id}/{self.position}: {self.status}"


class Gate(TenantOwned):
    """An agent's publish gate: when on, Publish needs a finished run of the draft on `dataset` whose pass rate
    reaches `threshold` and is not below the published version's latest run on the same dataset."""

    agent = models.OneToOneField(
        "agents.Agent", on_delete=models.CASCADE, related_name="eval_gate", verbose_name=_("agent")
    )
    enabled = models.BooleanField(_("publish gate on"), default=False)
    dataset = models.ForeignKey(
        Dataset, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("dataset")
    )
    threshold = models.FloatField(_("pass rate needed"), default=0.8, help_text=_("Between 0 and 1."))

    class Meta:
        verbose_name = _("publish gate")
        verbose_name_plural = _("publish gates")

    def __str__(self) -> str:
        return f"{self.agent_id}: {self.threshold:.0%}"
