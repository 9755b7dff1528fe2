"""The goal agent kind, registered when the agents app loads: its turn runner (goal agents do not chat: a run works
on a goal on its own page, so a message says where to go), its Celery tasks and its home-page card."""

from __future__ import annotations

from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

import agents.goal.tasks  # noqa: F401 - the run's Celery tasks
from agents.models import AgentKind
from agents.runtime import TurnContext, TurnResult, TurnRunner, register_runner
from tenants.navigation import HomeCard, register_card


class GoalAgentChatRunner(TurnRunner):
    """Answers a message to a goal agent with a link to the page that starts its runs."""

    kinds = (AgentKind.GOAL,)

    async def run(self, turn: TurnContext) -> TurnResult:
        url = reverse("agents:goal_start", args=[turn.config.agent_id])
        text = _(
            "%(name)s is a long-lived goal agent: it does not chat, it works on a goal on its own within the limits "
            "you set, and asks you when it needs you. Start a run and follow it on [its page](%(url)s)."
        ) % {"name": turn.config.name, "url": url}
        await turn.say(text)
        return await turn.finish(text, intent="goal", data={"goal_start_url": url})


register_runner(GoalAgentChatRunner())
register_card(
    HomeCard(
        key="goals",
        title=gettext_lazy("Goal runs"),
        description=gettext_lazy(
            "Long-lived goal agents working on a goal within limits: their iterations, tool calls and dreams."
        ),
        url_name="agents:goal_list",
        order=26,
    )
)
