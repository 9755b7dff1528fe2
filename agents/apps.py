from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = _("Agents")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from agents import toolloop  # noqa: F401 - the turn runner of chat and ReAct agents
        from agents.demo import seed_demo_agents
        from agents.goal import kind  # noqa: F401 - the long-lived goal agent kind, its tasks and its card
        from agents.models import Agent, AgentVersion
        from agents.tools import builtin  # noqa: F401 - registers the built-in tools
        from agents.tools.registry import get_tool
        from agents.workflows import agent_kind  # noqa: F401 - the workflow agent kind
        from llm.demo import register_tool_labels
        from tenants.demo import register_demo_seeder
        from tenants.generation import bump_on_change
        from tenants.navigation import HomeCard, register_card

        # What requests keep of an agent (agents.config.published_config, api.keys.key_agent) follows its changes.
        bump_on_change(Agent)
        bump_on_change(AgentVersion)

        # Every member sees the agents; the pages let only owners and admins change them.
        register_card(
            HomeCard(
                key="agents",
                title=_("Agents"),
                description=_("The tenant's agents: their models, token management, versions and metrics."),
                url_name="agents:list",
                order=20,
            )
        )
        register_demo_seeder(seed_demo_agents)
        # The offline demo model calls a tool a user names by its label (llm.demo).
        register_tool_labels(lambda name: (tool.label_en, tool.label_zh) if (tool := get_tool(name)) else ())
