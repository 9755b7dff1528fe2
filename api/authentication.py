"""DRF's side of API keys: authentication, the tenant scope of a key request, scope-based permissions."""

from __future__ import annotations

import contextlib
from typing import Any

from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions, permissions
from rest_framework.authentication import BaseAuthentication

from api.keys import KeyAccess, KeyRefused, authenticate_key, bearer_secret
from api.models import KeyScope
from tenants.access import may_administer
from tenants.scope import tenant_scope


class ApiKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer ak-...`: the request acts as the key's member, with the key as `request.auth`."""

    def authenticate(self, request: Any) -> tuple[Any, KeyAccess] | None:
        secret = bearer_secret(request.META.get("HTTP_AUTHORIZATION"))
        if secret is None:
            return None
        try:
            access = authenticate_key(secret)
        except KeyRefused as exc:
            raise exceptions.AuthenticationFailed(exc.message, code=exc.code) from None
        return access.user, access

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="api"'


class TenantScopedApiView:
    """Mixin of every API view: a key request runs in the key's tenant scope (a session request already runs in
    the scope the middleware entered); request.tenant and request.membership are set either way."""

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        with contextlib.ExitStack() as stack:
            self._scopes = stack
            return super().dispatch(request, *args, **kwargs)

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        self.perform_authentication(request)
        access = request.auth
        if isinstance(access, KeyAccess):
            self._scopes.enter_context(tenant_scope(access.tenant))
            request._request.tenant = access.tenant
            request._request.membership = access.membership
        elif request.user.is_authenticated and getattr(request._request, "tenant", None) is None:
            raise Http404(_("You are not working in any tenant."))
        super().initial(request, *args, **kwargs)


def key_access(request: Any) -> KeyAccess | None:
    access = getattr(request, "auth", None)
    return access if isinstance(access, KeyAccess) else None


class HasScope(permissions.BasePermission):
    """A key request needs the scope the view names for the method: `read` for safe methods, else the view's
    `write_scope` (`write` unless it says `chat`). A key limited to some agents writes only through the actions the
    view lists in `agent_limited_actions` (acting on those agents: the view's queryset narrows them); any other write
    (creating agents, knowledge bases) is refused. Session requests pass (the view checks roles)."""

    def has_permission(self, request: Any, view: Any) -> bool:
        access = key_access(request)
        if access is None:
            return request.user.is_authenticated
        if request.method in permissions.SAFE_METHODS:
            needed = KeyScope.READ
        else:
            needed = getattr(view, "write_scopes", {}).get(getattr(view, "action", None), KeyScope.WRITE)
        if not access.key.has_scope(needed):
            self.message = _("This API key does not have the “%(scope)s” scope.") % {"scope": needed}
            return False
        limited_write = request.method not in permissions.SAFE_METHODS and bool(access.chosen_agent_ids)
        if limited_write and getattr(view, "action", None) not in getattr(view, "agent_limited_actions", ()):
            self.message = _(
                "This API key is limited to some agents: it may use and change those agents only, not create "
                "agents nor change knowledge bases or anything else of the tenant. Use a key without an agent "
                "limit for that."
            )
            return False
        return True


def administers(request: Any) -> bool:
    return may_administer(user=request.user, membership=getattr(request, "membership", None))
