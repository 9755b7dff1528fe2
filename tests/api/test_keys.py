"""API keys: made on the tenant's page and in the admin, shown once, stored hashed, refused when they should be, and
never shown again in a page, a list or a log."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from api.keys import KeyRefused, authenticate_key, hash_secret, key_revoke
from api.models import ApiKey
from tenants.scope import all_tenants, tenant_scope

pytestmark = pytest.mark.django_db


def _create_on_page(client, **data):
    form = {"name": "CRM sync", "scopes": ["read", "chat"], **data}
    return client.post(reverse("api:keys"), form)


def test_a_key_made_on_the_page_is_shown_once_and_stored_hashed(login, tenant, tenant_admin, caplog):
    caplog.set_level(logging.DEBUG)
    client = login(tenant_admin, tenant)
    response = _create_on_page(client)
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = response.context["secret"]
    assert secret.startswith("ak-") and secret in response.content.decode()
    with tenant_scope(tenant):
        key = ApiKey.objects.get()
    assert key.secret_hash == hash_secret(secret) and secret not in key.secret_hash
    assert key.user == tenant_admin and sorted(key.scopes) == ["chat", "read"]
    assert authenticate_key(secret).tenant == tenant

    listing = client.get(reverse("api:keys")).content.decode()
    assert key.prefix in listing and secret not in listing and secret.partition(".")[2] not in listing
    assert secret not in caplog.text and secret.partition(".")[2] not in caplog.text


def test_members_may_not_manage_keys(login, tenant, member, tenant_admin):
    assert login(member, tenant).get(reverse("api:keys")).status_code == 403


def test_another_tenants_key_cannot_be_revoked(login, tenant, other_tenant, tenant_admin, other_tenant_admin, make_key):
    key, secret = make_key(other_tenant_admin, owner=other_tenant)
    client = login(tenant_admin, tenant)
    assert client.get(reverse("api:revoke", args=[key.pk])).status_code == 404
    assert client.post(reverse("api:revoke", args=[key.pk])).status_code == 404
    assert authenticate_key(secret).tenant == other_tenant
    assert key.prefix not in client.get(reverse("api:keys")).content.decode()


def test_revoking_asks_first_then_refuses_the_key(login, tenant, tenant_admin, make_key):
    key, secret = make_key(tenant_admin)
    client = login(tenant_admin, tenant)
    confirm = client.get(reverse("api:revoke", args=[key.pk]))
    assert confirm.status_code == 200 and b"confirm-revoke" in confirm.content
    authenticate_key(secret)  # still valid after the confirmation page
    assert client.post(reverse("api:revoke", args=[key.pk])).status_code == 302
    with pytest.raises(KeyRefused) as refused:
        authenticate_key(secret)
    assert refused.value.code == "revoked_api_key"


@pytest.mark.parametrize(
    ("data", "field"),
    [({"name": ""}, "name"), ({"scopes": []}, "scopes"), ({"expires_at": "2001-01-01"}, "expires_at")],
)
def test_bad_key_input_is_named(login, tenant, tenant_admin, data, field):
    response = _create_on_page(login(tenant_admin, tenant), **data)
    assert response.status_code == 200 and field in response.context["form"].errors
    with tenant_scope(tenant):
        assert not ApiKey.objects.exists()


def test_a_foreign_agent_cannot_be_chosen(login, tenant, tenant_admin, published):
    response = _create_on_page(login(tenant_admin, tenant), agents=[published.foreign.pk])
    assert "agents" in response.context["form"].errors


def test_the_admin_shows_the_secret_once_and_never_lists_it(login, tenant, tenant_admin, caplog):
    caplog.set_level(logging.DEBUG)
    client = login(tenant_admin, tenant)
    response = client.post(
        reverse("admin:api_apikey_add"), {"name": "from the admin", "scopes": ["read"], "expires_at": ""}
    )
    assert response.status_code == 200, response.content[:2000]
    secret = response.context["secret"]
    with tenant_scope(tenant):
        key = ApiKey.objects.get()
    assert key.user == tenant_admin and key.scopes == ["read"] and key.secret_hash == hash_secret(secret)
    for url in (reverse("admin:api_apikey_changelist"), reverse("admin:api_apikey_change", args=[key.pk])):
        page = client.get(url).content.decode()
        assert key.prefix in page and secret not in page and key.secret_hash not in page
    assert secret not in caplog.text


def test_the_admin_of_another_tenant_does_not_see_the_key(login, tenant, other_tenant, other_tenant_admin,
                                                          tenant_admin, make_key):  # fmt: skip
    key, _secret = make_key(tenant_admin)
    client = login(other_tenant_admin, other_tenant)
    assert key.prefix not in client.get(reverse("admin:api_apikey_changelist")).content.decode()
    assert client.get(reverse("admin:api_apikey_change", args=[key.pk])).status_code in (302, 404)


def test_unknown_and_malformed_keys_are_refused(tenant_admin, make_key):
    key, secret = make_key(tenant_admin)
    for wrong in (None, "", "sk-123", f"{key.prefix}.wrong", secret + "x", "ak-0000000000.abc"):
        with pytest.raises(KeyRefused) as refused:
            authenticate_key(wrong)
        assert refused.value.status == 401
    with all_tenants(reason="test"):
        assert ApiKey.objects.count() == 1


def test_l6_a_tenant_has_at_most_api_tenant_max_keys_active_keys(login, tenant, other_tenant, tenant_admin,
                                                                 other_tenant_admin, make_key, settings):  # fmt: skip
    settings.API_TENANT_MAX_KEYS = 2
    first, _secret = make_key(tenant_admin)
    make_key(tenant_admin)
    with pytest.raises(ValidationError, match="2 active API keys"):
        make_key(tenant_admin)
    client = login(tenant_admin, tenant)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "en"
    refused = _create_on_page(client, name="one too many")
    assert refused.status_code == 200 and "secret" not in refused.context
    assert "already has 2 active API keys" in refused.content.decode()
    admin_refused = client.post(reverse("admin:api_apikey_add"), {"name": "admin one", "scopes": ["read"]})
    assert admin_refused.status_code == 200 and "secret" not in admin_refused.context
    assert "already has 2 active API keys" in admin_refused.content.decode()
    make_key(other_tenant_admin, owner=other_tenant)  # another tenant counts its own keys
    with tenant_scope(tenant):
        assert ApiKey.objects.count() == 2
        key_revoke(key=first)
    assert _create_on_page(client, name="after a revocation").context["secret"].startswith("ak-")
