"""Template tags of the model gateway: the demo-model banner."""

from __future__ import annotations

from django import template

from llm.selectors import default_provider
from llm.services import scope_of

register = template.Library()


@register.inclusion_tag("llm/demo_banner.html", takes_context=True)
def demo_model_banner(context, tenant=None) -> dict:
    """A banner when the tenant's default provider is the offline demo model, saying how to connect a real one."""
    request = context.get("request")
    tenant = tenant or getattr(request, "tenant", None)
    provider = None
    if tenant is not None:
        with scope_of(tenant):
            provider = default_provider(tenant=tenant)
    membership = getattr(request, "membership", None)
    return {
        "show": provider is not None and provider.is_demo,
        "provider": provider,
        "can_administer": bool(membership and membership.can_administer and request.user.is_staff),
    }
