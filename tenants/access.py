"""Who may administer a tenant: the one definition the pages, the websocket and the API share."""

from __future__ import annotations

from typing import Any


def may_administer(*, user: Any, membership: Any) -> bool:
    """Owners and admins of the tenant (`membership` is the user's membership of it, or None), and platform
    superusers, who act as owners everywhere, administer it; members do not."""
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_superuser or (membership is not None and membership.can_administer))
