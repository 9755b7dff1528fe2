"""The judge: the tenant's own model scoring a reply against a case's rubric (issue 39).

The judge is the dataset's agent's model (its published version's provider and model, the draft's while nothing is
published), called through the agent's one model-call seam (agents.modelcall.AgentModel -> llm.client), so each
call is an LLMCall row of the tenant, counted in its usage and held to its monthly budget like every other call.
Its instructions are the dataset's `judge_prompt` (shown and editable on the dataset's page), else
DEFAULT_JUDGE_PROMPT; the rubric, the user's turns and the reply follow in one user message (`judge_message`).
The model answers a JSON object {"score": 1-5, "reason": "..."}; an answer that is not one is a failed score that
says so, never a crash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.utils.translation import gettext as _

from agents.config import published_config
from agents.modelcall import AgentModel
from evals.models import MAX_SCORE, MIN_SCORE, Dataset
from llm.messages import ChatMessage
from llm.models import Purpose
from llm.options import ChatRequest

# Bilingual-neutral on purpose: the reply and rubric may be Chinese or English; the reason follows their language.
DEFAULT_JUDGE_PROMPT = """You are an evaluation judge. You grade one reply of an AI assistant against a rubric.
你是评测裁判：按评分标准给 AI 助手的一条回复打分。

Read the user's turns, the reply and the rubric. Score how well the reply meets the rubric:
5 = fully meets it, 4 = meets it with small flaws, 3 = partly, 2 = mostly not, 1 = not at all.
Judge only against the rubric; do not reward length or politeness for their own sake.

Answer with one JSON object and nothing else:
{"score": <an integer from 1 to 5>, "reason": "<one or two sentences, in the language of the rubric>"}"""

# A judge's answer is short: asking for more than this would only cost the tenant.
JUDGE_MAX_TOKENS = 300
# The model calls of the judge are recorded with this purpose (llm.models.Purpose).
JUDGE_PURPOSE = Purpose.JUDGE
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True)
class JudgeScore:
    """A judge's score (1-5) and its reason, and the tokens the call took. `valid` False: the answer could not be
    read as a score (`reason` says so, `score` is 0)."""

    score: int
    reason: str
    tokens: int
    valid: bool = True


def judge_message(*, rubric: str, turns: list[str], reply: str) -> str:
    """The user message the judge reads: the rubric, the user's turns in order and the reply to score."""
    numbered = "\n".join(f"{index}. {turn}" for index, turn in enumerate(turns, start=1))
    return (
        f"# Rubric / 评分标准\n{rubric}\n\n# User turns / 用户消息\n{numbered}\n\n"
        f"# Reply to score / 待评回复\n{reply}\n"
    )


def parse_score(text: str) -> tuple[int, str] | None:
    """(score, reason) from a judge's answer: a JSON object (alone, in a ```json block or among words) with an
    integer score from 1 to 5; None when there is none."""
    found = _OBJECT.search(text or "")
    if found is None:
        return None
    try:
        data: Any = json.loads(found.group(0))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    score = data.get("score")
    if isinstance(score, float) and score.is_integer():
        score = int(score)
    if isinstance(score, str) and score.strip().isdigit():
        score = int(score.strip())
    if isinstance(score, bool) or not isinstance(score, int) or not MIN_SCORE <= score <= MAX_SCORE:
        return None
    return score, str(data.get("reason") or "").strip()


class Judge:
    """Scores replies against rubrics with one model (`model`) and one prompt (`prompt`)."""

    def __init__(self, *, model: AgentModel, prompt: str) -> None:
        self.model = model
        self.prompt = prompt

    def request(self, *, rubric: str, turns: list[str], reply: str) -> ChatRequest:
        """The model call that scores `reply`."""
        messages = [
            ChatMessage.system(self.prompt),
            ChatMessage.user(judge_message(rubric=rubric, turns=turns, reply=reply)),
        ]
        return ChatRequest(messages=messages, temperature=0.0, max_tokens=JUDGE_MAX_TOKENS)

    async def score(self, *, rubric: str, turns: list[str], reply: str) -> JudgeScore:
        """The judge's score of `reply` against `rubric`. The model's errors (llm.errors.LLMError: the budget spent,
        the provider down) propagate; an answer that is not a score is an invalid JudgeScore saying so."""
        result = await self.model.complete(self.request(rubric=rubric, turns=turns, reply=reply))
        tokens = result.usage.total_tokens
        parsed = parse_score(result.text)
        if parsed is None:
            shown = " ".join(result.text.split())[:200]
            reason = _("The judge's answer is not a JSON score from 1 to 5: “%(answer)s”") % {"answer": shown}
            return JudgeScore(score=0, reason=reason, tokens=tokens, valid=False)
        return JudgeScore(score=parsed[0], reason=parsed[1], tokens=tokens)


def judge_for(dataset: Dataset) -> Judge:
    """The judge of `dataset`'s rubrics: its agent's model (the published version's, else the draft's) and the
    dataset's prompt (else DEFAULT_JUDGE_PROMPT). Reads the database: from async code, call it through
    core.db.database_sync_to_async."""
    agent = dataset.agent
    config = published_config(agent).config
    model = AgentModel.of(config, tenant=agent.tenant, purpose=JUDGE_PURPOSE)
    return Judge(model=model, prompt=dataset.judge_prompt.strip() or DEFAULT_JUDGE_PROMPT)
