"""Making, checking and revoking API keys. The secret leaves this module once, from key_create()."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from agents.models import Agent
from api.models import ApiKey, KeyScope
from core.conf import setting
from engine.admission import Caller, CallerKind
from memory.models import Conversation, ConversationSource
from memory.selectors import access_conversation
from tenants.generation import TenantMemo
from tenants.models import Membership, Role, Tenant
from tenants.scope import all_tenants, tenant_scope

KEY_START = "ak-"
# last_used_at is written at most this often per key (not once per request).
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    """The stored form of a key: its SHA-256. Keys are 40+ random characters, so a fast hash is what fits."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> tuple[str, str]:
    """A fresh key: its visible prefix and the whole secret (`ak-<prefix>.<random>`), of which only the hash is kept."""
    prefix = KEY_START + secrets.token_hex(5)
    return prefix, f"{prefix}.{secrets.token_urlsafe(32)}"


def scope_name(scope: str) -> str:
    """A scope's short name in the active language: its label (KeyScope) up to the colon ("read", "读取")."""
    try:
        label = str(KeyScope(scope).label)
    except ValueError:
        return scope
    return re.split(r"[:：]", label, maxsplit=1)[0].strip()


def scope_names(scopes: Iterable[str]) -> list[str]:
    """The short names of `scopes`, in KeyScope's order."""
    order = list(KeyScope.values)
    ordered = sorted(scopes, key=lambda scope: order.index(scope) if scope in order else len(order))
    return [scope_name(scope) for scope in ordered]


def key_create(
    *,
    tenant: Tenant,
    user: AbstractBaseUser,
    name: str,
    scopes: Iterable[str] = (KeyScope.READ, KeyScope.CHAT),
    agents: Iterable[Agent] = (),
    expires_at: dt.datetime | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its secret (`ak-<prefix>.<secret>`), which is never stored and cannot be shown again."""
    scopes = sorted({str(scope) for scope in scopes})
    unknown = set(scopes) - set(KeyScope.values)
    if not scopes or unknown:
        names = pgettext("list separator", ", ").join(scope_names(KeyScope.values))
        raise ValidationError({"scopes": _("Choose at least one of: %(scopes)s.") % {"scopes": names}})
    agents = list(agents)
    if any(agent.tenant_id != tenant.pk for agent in agents):
        raise ValidationError({"agents": _("Choose agents of this tenant.")})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": _("Choose a time in the future.")})
    key_limit_check(tenant=tenant)
    prefix, secret = new_secret()
    key = ApiKey(
        tenant=tenant,
        user=user,
        name=name.strip(),
        prefix=prefix,
        secret_hash=hash_secret(secret),
        scopes=scopes,
        expires_at=expires_at,
    )
    key.full_clean(exclude=["prefix", "secret_hash"])
    with transaction.atomic():
        key.save()
        key.agents.set(agents)
    return key, secret


def key_limit_check(*, tenant: Tenant) -> None:
    """ValidationError when the tenant already has API_TENANT_MAX_KEYS active keys (not revoked, not expired)."""
    limit = setting("API_TENANT_MAX_KEYS")
    now = timezone.now()
    active = ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    )
    if limit and active.count() >= limit:
        message = _(
            "This tenant already has %(n)s active API keys, its limit: revoke a key that is no longer used first."
        )
        raise ValidationError({NON_FIELD_ERRORS: [message % {"n": limit}]})


def key_revoke(*, key: ApiKey) -> ApiKey:
    """Refuse the key from now on (it stays listed, marked revoked)."""
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
    return key


class KeyRefused(Exception):
    """A request's key is missing, wrong, revoked, expired or lacks a scope. `status` is the HTTP status."""

    def __init__(self, code: str, message: str, status: int = 401, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class KeyAccess:
    """What a request with a valid key may do: act as `user` (with `membership`) in `tenant`, within the key."""

    key: ApiKey
    tenant: Tenant
    user: Any
    membership: Membership

    def require(self, *scopes: str) -> None:
        """Refuse unless the key has one of `scopes`."""
        if scopes and not any(self.key.has_scope(scope) for scope in scopes):
            raise KeyRefused(
                "insufficient_scope",
                _("This API key does not have the “%(scope)s” scope.") % {"scope": " / ".join(scopes)},
                status=403,
            )

    @cached_property
    def chosen_agent_ids(self) -> frozenset[int]:
        """The agents the key was limited to when it was made (empty: every agent), read once per request."""
        return frozenset(self.key.agents.values_list("pk", flat=True))

    def caller(self, source: ConversationSource) -> Caller:
        """The key as the engine's admission knows a caller: its member, limited to its agents; its streams counted."""
        with tenant_scope(self.tenant):
            agent_ids = self.chosen_agent_ids
        return Caller(
            tenant=self.tenant, source=source, kind=CallerKind.KEY, user=self.user, membership=self.membership,
            agent_ids=agent_ids,
        )  # fmt: skip

    def agents(self) -> QuerySet[Agent]:
        """The agents the key reaches: published, active, and the key's own choice when it made one. Run in the
        key's tenant scope."""
        agents = Agent.objects.filter(active=True, versions__isnull=False).distinct()
        if self.chosen_agent_ids:
            agents = agents.filter(pk__in=self.chosen_agent_ids)
        return agents


def bearer_secret(authorization: str | None) -> str | None:
    """The key in an `Authorization: Bearer <key>` header, or None."""
    if not authorization:
        return None
    kind, _sep, value = authorization.strip().partition(" ")
    if kind.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def looks_like_key(secret: str | None) -> bool:
    return bool(secret) and secret.startswith(KEY_START) and "." in secret


class _MemberLeft:
    """What a key whose member left the tenant reads as (kept like an access, refused at each request)."""

    def __init__(self, key: ApiKey) -> None:
        self.key = key


# A key's tenant by its prefix: a key never changes tenant, so this is kept for the process's life; with it, the key
# is read from the tenant's memo (tenants.generation) instead of three statements per request.
_key_tenants: dict[str, int] = {}
_accesses: TenantMemo[KeyAccess | _MemberLeft | None] = TenantMemo()


def _read_access(prefix: str) -> KeyAccess | _MemberLeft | None:
    """The key of `prefix` as requests use it, read from the database: its tenant, member and chosen agents."""
    with all_tenants(reason="finding an API key by its prefix, before its tenant is known"):
        key = ApiKey.objects.select_related("tenant", "user").filter(prefix=prefix).first()
    if key is None:
        return None
    membership = Membership.objects.filter(user=key.user, tenant=key.tenant).first()
    if membership is None:
        if not key.user.is_superuser:
            return _MemberLeft(key)
        membership = Membership(user=key.user, tenant=key.tenant, role=Role.OWNER)
    access = KeyAccess(key=key, tenant=key.tenant, user=key.user, membership=membership)
    with tenant_scope(key.tenant):
        access.chosen_agent_ids  # noqa: B018 - read now, kept with the access
    return access


def _find_access(prefix: str) -> KeyAccess | _MemberLeft | None:
    tenant_id = _key_tenants.get(prefix)
    if tenant_id is not None:
        return _accesses.get(tenant_id, prefix, lambda: _read_access(prefix))
    found = _read_access(prefix)  # not kept: its generation was not read before it (the next request keeps it)
    if found is not None:
        _key_tenants[prefix] = found.key.tenant_id
    return found


def authenticate_key(secret: str | None) -> KeyAccess:
    """The access a key grants, or KeyRefused. The key is found by its prefix across tenants (the one place the
    tenant is not yet known), then compared in constant time. What it reads is kept per process under its tenant's
    generation (a revoked key, a member who left, an inactive tenant are refused at the next request)."""
    if not secret:
        raise KeyRefused("missing_api_key", _("Send an API key: Authorization: Bearer <key>."))
    if not looks_like_key(secret):
        raise KeyRefused("invalid_api_key", _("This API key is not valid."))
    found = _find_access(secret.partition(".")[0])
    key = found.key if found is not None else None
    if key is None or not hmac.compare_digest(key.secret_hash, hash_secret(secret)):
        raise KeyRefused("invalid_api_key", _("This API key is not valid."))
    if key.revoked_at is not None:
        raise KeyRefused("revoked_api_key", _("This API key was revoked."))
    now = timezone.now()
    if key.expires_at is not None and key.expires_at <= now:
        raise KeyRefused("expired_api_key", _("This API key has expired."))
    if not key.tenant.active or not key.user.is_active:
        raise KeyRefused("inactive_tenant", _("The tenant or the member this key acts as is no longer active."))
    if isinstance(found, _MemberLeft):
        raise KeyRefused("member_left", _("The member this key acts as has left the tenant."))
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_RESOLUTION:
        ApiKey._base_manager.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        key.last_used_at = now  # the kept key too (an update sends no signal: the generation stays)
    return found


_key_agents: TenantMemo[Agent | None] = TenantMemo()


def key_agent(access: KeyAccess, slug: str) -> Agent | None:
    """The agent of API name `slug` that `access` reaches (published, active, within the key's choice), or None;
    kept per process under the tenant's generation. Run in the key's tenant scope."""
    return _key_agents.get(
        access.tenant.pk, (slug, access.chosen_agent_ids), lambda: access.agents().filter(slug=slug).first()
    )


def caller_conversation(*, conversation_id: int, user: Any, membership: Any, access: KeyAccess | None) -> Conversation:
    """The conversation an API caller may read: memory.selectors.access_conversation's rule, never a plan step's
    internal one, and for a key only one of the agents it reaches. Conversation.DoesNotExist otherwise. Run in the
    caller's tenant scope. Posting into one is the engine's admission's decision (its participant only)."""
    conversation = access_conversation(conversation_id=conversation_id, user=user, membership=membership)
    if conversation.parent_id is not None:
        raise Conversation.DoesNotExist
    if access is not None and not access.agents().filter(pk=conversation.agent_id).exists():
        raise Conversation.DoesNotExist
    return conversation
