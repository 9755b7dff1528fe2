"""Demo data of the evaluation: the restaurant waiter's dataset "示例评测 / Sample evaluation" (docs/evaluation.md).

Five cases that the offline demo model passes, one per thing the README's first journey shows the waiter do (the
menu tool, asking back for a quantity, an order with its arguments, a sold-out dish) and a rubric the demo model's
judge scores (llm/scripts/demo.yaml, rule eval-judge: a fixed 4, said to be a demo's). With them a stranger who
just ran `make run` can run the dataset against the published waiter and its draft, compare the runs and try the
publish gate without writing a case first.

Registered from EvalsConfig.ready() for the restaurant pack (tenants.demo), after the pack's own seeder has made
the waiter. Idempotent, as `seed_demo` runs on every `make run`: the dataset is made once, and its demo cases
(found by title) are brought back to their demo turns and expectations; cases a person added are left alone.
The texts are bilingual and fixed (not translated), as the demo agents' names are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agents.models import Agent
from evals.models import Case, Dataset, ExpectationKind
from evals.services import case_create, case_update, clean_expectations, dataset_create, dataset_update
from tenants.models import Tenant
from tenants.scope import tenant_scope

# The restaurant pack's key and its waiter's name (agents/packs/restaurant/demo.py). Named here, not imported: no code
# outside a pack imports one (pyproject.toml's import contracts); tests/evals/test_demo_dataset.py seeds both.
RESTAURANT_PACK = "restaurant"
WAITER_NAME = "成都小吃服务员 / Chengdu Snacks waiter"
SAMPLE_DATASET_NAME = "示例评测 / Sample evaluation"
SAMPLE_DATASET_DESCRIPTION = (
    "成都小吃服务员的示例用例：看菜单、追问数量、点餐、售罄的菜、一个由评审模型打分的评分标准。"
    "在已发布版本和草稿上各运行一次，再比较两次运行。\n"
    "Sample cases for the Chengdu Snacks waiter: the menu, asking back for a quantity, an order, a sold-out dish, "
    "and a rubric scored by the judge model. Run it on the published version and on the draft, then compare the runs."
)

# (title, user turns, expectations on the reply to the last turn): what the demo model does in the README's journey 1.
SAMPLE_CASES: tuple[tuple[str, list[str], list[dict[str, Any]]], ...] = (
    (
        "看菜单时调用 menu 工具 / Reads the menu with the menu tool",
        ["看看菜单"],
        [{"kind": ExpectationKind.TOOL_CALLED, "name": "menu"}, {"kind": ExpectationKind.CONTAINS, "text": "包子"}],
    ),
    (
        "没说数量时追问 / Asks how many when no quantity is given",
        ["我要包子"],
        [{"kind": ExpectationKind.QUESTION}],
    ),
    (
        "点餐时带上菜名和数量 / Orders with the dish and the quantity",
        ["来3个包子"],
        [{"kind": ExpectationKind.TOOL_CALLED, "name": "order", "arguments": {"dish": "包子", "quantity": 3}}],
    ),
    (
        "售罄的菜如实告知 / Says a sold-out dish is sold out",
        ["再来两个面包"],
        # The tool's words are in the run's language (Chinese by default, English under an English site default).
        [
            {"kind": ExpectationKind.CONTAINS, "text": "面包"},
            {"kind": ExpectationKind.MATCHES, "pattern": "售罄|sold out"},
        ],
    ),
    (
        "点餐后结账 / Checks out after an order",
        ["来3个包子", "结账"],
        [
            {"kind": ExpectationKind.TOOL_CALLED, "name": "checkout"},
            {
                "kind": ExpectationKind.RUBRIC,
                "rubric": "回复告诉顾客订单已结账并给出总价（3 个包子 ¥9.00），语气礼貌。"
                "The reply tells the customer the order is paid, with its total (3 包子: ¥9.00), politely.",
                "min_score": 4,
            },
        ],
    ),
)


def _waiter(tenant: Tenant) -> Agent | None:
    return Agent.objects.filter(tenant=tenant, name=WAITER_NAME).first()


def sample_dataset_ensure(*, agent: Agent) -> Dataset:
    """`agent`'s sample dataset with the demo cases as SAMPLE_CASES says (created, or brought back to them); other
    cases of the dataset are kept. Runs inside the agent's tenant scope."""
    dataset = Dataset.objects.filter(agent=agent, name=SAMPLE_DATASET_NAME).first()
    if dataset is None:
        dataset = dataset_create(agent=agent, name=SAMPLE_DATASET_NAME, description=SAMPLE_DATASET_DESCRIPTION)
    elif dataset.description != SAMPLE_DATASET_DESCRIPTION:
        dataset = dataset_update(dataset=dataset, description=SAMPLE_DATASET_DESCRIPTION)
    existing = {case.title: case for case in Case.objects.filter(dataset=dataset)}
    for position, (title, turns, expectations) in enumerate(SAMPLE_CASES):
        case = existing.get(title)
        if case is None:
            case = case_create(dataset=dataset, title=title, turns=turns, expectations=expectations)
        wanted = {"turns": turns, "expectations": clean_expectations(expectations), "position": position}
        if any(getattr(case, name) != value for name, value in wanted.items()):
            case_update(case=case, **wanted)
    return dataset


def seed_sample_evaluation(tenants: Sequence[Tenant], write: Callable[[str], None]) -> None:
    """seed_demo: each restaurant tenant's waiter gets the sample dataset (idempotent; a tenant without the waiter
    is skipped)."""
    for tenant in tenants:
        with tenant_scope(tenant):
            agent = _waiter(tenant)
            if agent is None:
                continue
            dataset = sample_dataset_ensure(agent=agent)
            count = dataset.cases.count()
        write(f"Evaluation / 评测 @ {tenant.name}: {agent.name} › {dataset.name} ({count} cases)")
