"""Seed 1's two example workflows, offered as templates ("New from template"), text exactly as the seed has it."""

from __future__ import annotations

from pathlib import Path

from django.utils.translation import gettext_lazy as _

FOLDER = Path(__file__).resolve().parent / "examples"

TEMPLATES = {
    "menu_recommendation": (_("Menu recommendation (菜单推荐工作流)"), "menu_recommendation.yaml"),
    "customer_marketing": (_("Customer marketing (客户营销工作流)"), "customer_marketing.yaml"),
}


def template_text(key: str) -> str:
    """The YAML of the template `key` (KeyError when there is none)."""
    return (FOLDER / TEMPLATES[key][1]).read_text(encoding="utf-8")
