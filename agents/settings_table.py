"""The agent settings, declared once: each setting's name, type, default, and whether a published version freezes
it, the services edit it and the YAML export carries it.

What the rest of the app lists is derived from this table: the keys of a version's snapshot (SNAPSHOT_FIELDS,
Agent.snapshot), what agent_create/agent_update take (EDITABLE_FIELDS), what the export writes and the import reads
(agents.export.FIELDS), and the AgentConfig a turn runs with (agents.config resolves a snapshot through it). The
model's fields, the form, the admin and the REST serializers stay explicit Django; tests/agents/test_settings_table.py
checks that they agree with the table and cover it.

A new setting: its model field (and migration), a row here, an AgentConfig attribute if a turn reads it, then the
form, admin and serializer fields the coverage test asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from knowledge.models import KnowledgeBase
from llm.models import ModelProvider
from memory.overflow import OverflowConfig

if TYPE_CHECKING:
    from agents.models import Agent


# --- how a snapshot's value (None when the snapshot has none) is read, given the setting's default -----------------


def read_text(value: Any, default: Any) -> str:
    return str(value or default)


def read_flag(value: Any, default: Any) -> bool:
    return bool(value) if value is not None else bool(default)


def read_temperature(value: Any, default: Any) -> float | None:
    # Every snapshot holds one; a hand-made one without it leaves the provider's own temperature (None).
    return float(value) if value is not None else None


def read_reply_cap(value: Any, default: Any) -> int | None:
    return int(value) if value else None  # absent (a version published before the setting) or 0: no cap


def read_names(value: Any, default: Any) -> tuple[str, ...]:
    return tuple(str(name) for name in value or ())


def read_ids(value: Any, default: Any) -> tuple[int, ...]:
    return tuple(int(pk) for pk in value or ())


def read_overflow(value: Any, default: Any) -> OverflowConfig:
    return OverflowConfig.from_dict(value)


def read_as_is(value: Any, default: Any) -> Any:
    return value if value is not None else default


# --- how a draft's value is frozen, when not the field's value as it is ---------------------------------------------


def frozen_overflow(agent: Agent) -> dict[str, Any]:
    return agent.overflow_config().to_dict()  # normalised: every key, defaults filled in


def frozen_knowledge_base_ids(agent: Agent) -> list[int]:
    return sorted(agent.knowledge_bases.values_list("pk", flat=True)) if agent.pk else []


@dataclass(frozen=True)
class AgentSetting:
    """One agent setting: a field of Agent (`name`), and where it goes."""

    name: str
    # What the services take (and the model field holds): a Python type, None allowed where the field is nullable.
    type: Any
    # A new agent's value (the model field's default; never mutated).
    default: Any
    # A published version freezes it: new conversations run the version's value, not the draft's.
    snapshotted: bool = True
    # agent_create/agent_update take it (the form, the admin and the REST write serializer show it).
    editable: bool = True
    # The YAML export writes it and the import reads it back.
    exported: bool = True
    # Its key in a version's snapshot, when not its name (a relation is frozen as ids).
    key: str = ""
    # The AgentConfig attribute a turn reads it as ("": none, or agents.config composes it with more than its value).
    config: str = ""
    # The draft's value as JSON (None: the attribute named by the key, as it is).
    freeze: Callable[[Agent], Any] | None = None
    # A snapshot's value as AgentConfig holds it, given the default (the value is None when the snapshot has none).
    read: Callable[[Any, Any], Any] = read_as_is
    # Left out of a snapshot while it has its default: a version published before the setting existed then still
    # equals its unchanged draft (agent_ensure publishes nothing new for it), and reads back as the default.
    omit_default: bool = False

    @property
    def snapshot_key(self) -> str:
        return self.key or self.name

    def draft_value(self, agent: Agent) -> Any:
        """The draft's value of this setting as JSON (what a version freezes, what the export writes)."""
        return self.freeze(agent) if self.freeze is not None else getattr(agent, self.snapshot_key)


class SettingsTable:
    """The agent settings in order (the order of a snapshot's keys and of the export), with what derives from them."""

    def __init__(self, settings: Iterable[AgentSetting]) -> None:
        self.settings = tuple(settings)
        names = [setting.name for setting in self.settings]
        if len(set(names)) != len(names):
            raise ValueError(f"Agent settings declared twice: {sorted({n for n in names if names.count(n) > 1})}")

    def __iter__(self) -> Iterator[AgentSetting]:
        return iter(self.settings)

    def __getitem__(self, name: str) -> AgentSetting:
        for setting in self.settings:
            if setting.name == name:
                return setting
        raise KeyError(name)

    def extended(self, *settings: AgentSetting) -> SettingsTable:
        """A copy of the table with `settings` added at the end."""
        return SettingsTable((*self.settings, *settings))

    @property
    def snapshot_keys(self) -> tuple[str, ...]:
        return tuple(setting.snapshot_key for setting in self.settings if setting.snapshotted)

    @property
    def editable_fields(self) -> tuple[str, ...]:
        return tuple(setting.name for setting in self.settings if setting.editable)

    @property
    def export_fields(self) -> tuple[str, ...]:
        return tuple(setting.name for setting in self.settings if setting.exported)

    def freeze(self, agent: Agent) -> dict[str, Any]:
        """The snapshot of `agent`'s draft settings, by snapshot key."""
        data = {}
        for setting in self.settings:
            if not setting.snapshotted:
                continue
            value = setting.draft_value(agent)
            if not (setting.omit_default and value == setting.default):
                data[setting.snapshot_key] = value
        return data

    def export(self, agent: Agent) -> dict[str, Any]:
        """`agent`'s exported settings, by name (choices as plain strings: an enum member is not YAML)."""
        values = ((setting.name, setting.draft_value(agent)) for setting in self.settings if setting.exported)
        return {name: str(value) if isinstance(value, str) else value for name, value in values}

    def read(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """Every snapshotted setting of `snapshot` by name, as a turn reads it (the default where it has none)."""
        return {
            setting.name: setting.read(snapshot.get(setting.snapshot_key), setting.default)
            for setting in self.settings
            if setting.snapshotted
        }

    def config_fields(self, values: dict[str, Any]) -> dict[str, Any]:
        """The AgentConfig attributes the settings fill as they are, from `read`'s values."""
        return {setting.config: values[setting.name] for setting in self.settings if setting.config}


SETTINGS = SettingsTable(
    [
        AgentSetting("name", str, "", read=read_text),
        AgentSetting("description", str, "", read=read_text),
        AgentSetting("system_prompt", str, "", config="system_prompt", read=read_text),
        # The provider belongs to the tenant: never exported (an import takes the tenant's default).
        AgentSetting("provider", ModelProvider | None, None, exported=False, key="provider_id"),
        AgentSetting("model", str, "", read=read_text),
        AgentSetting("temperature", float, 0.7, config="temperature", read=read_temperature),
        AgentSetting("kind", str, "chat", config="kind", read=read_text),
        AgentSetting("tools", list[str], [], read=read_names),
        AgentSetting(
            "token_overflow_config",
            dict[str, Any],
            {"strategy": "none"},
            config="overflow",
            freeze=frozen_overflow,
            read=read_overflow,
        ),
        AgentSetting("long_term_memory", bool, False, config="long_term_memory", read=read_flag),
        AgentSetting("memory_extraction", str, "model", config="memory_extraction", read=read_text),
        AgentSetting(
            "max_reply_tokens", int | None, None, config="max_reply_tokens", read=read_reply_cap, omit_default=True
        ),
        # Knowledge bases belong to the tenant: never exported.
        AgentSetting(
            "knowledge_bases",
            list[KnowledgeBase],
            [],
            exported=False,
            key="knowledge_base_ids",
            config="knowledge_base_ids",
            freeze=frozen_knowledge_base_ids,
            read=read_ids,
        ),
        # Whether the agent is offered at all: the draft's switch, never a version's.
        AgentSetting("active", bool, True, snapshotted=False, exported=False),
    ]
)
