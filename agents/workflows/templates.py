"""Workflow templates ("New from template"): YAML documents that apps and packs register from their AppConfig.ready().

A pack's template (`pack=`) is offered only to the tenants that have the pack enabled (tenants.packs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.utils.functional import Promise

from core.registry import Registry
from tenants.packs import pack_enabled

if TYPE_CHECKING:
    from tenants.models import Tenant


@dataclass(frozen=True)
class WorkflowTemplate:
    key: str
    label: str | Promise
    path: Path
    pack: str = ""

    def text(self) -> str:
        return self.path.read_text(encoding="utf-8")


_templates: Registry[WorkflowTemplate] = Registry("the workflow templates (agents.workflows.templates)")


def register_template(template: WorkflowTemplate) -> WorkflowTemplate:
    """Offer `template` on the workflows page (registering the same one again is harmless)."""
    return _templates.register(template.key, template)


def templates_for(tenant: Tenant) -> list[WorkflowTemplate]:
    """The templates `tenant` is offered: the platform's and those of the packs enabled for it."""
    return [template for template in _templates if pack_enabled(tenant, template.pack)]


def template_for(key: str, *, tenant: Tenant) -> WorkflowTemplate | None:
    """The template `key` if `tenant` is offered it (None otherwise, as for a key that does not exist)."""
    template = _templates.find(key)
    return template if template is not None and pack_enabled(tenant, template.pack) else None


def template_text(key: str) -> str:
    """The YAML of the registered template `key`, whatever the tenant (a KeyError when there is none)."""
    return _templates.get(key).text()
