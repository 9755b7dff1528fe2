"""Pages: login, home, tenant switcher, language switcher; a user in two tenants sees one tenant at a time."""

import pytest
from django.urls import reverse

from tenants.models import Role
from tenants.scope import tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.tenancy_fixture.models import Project

pytestmark = pytest.mark.django_db


def test_home_requires_login(client):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert reverse("login") in response.url


def test_login_page_and_logout(client, member, tenant):
    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "member", "password": "pw"})
    assert response.status_code == 302
    home = client.get(reverse("home"))
    assert tenant.name in home.content.decode()
    client.post(reverse("logout"))
    assert client.get(reverse("home")).status_code == 302


def test_wrong_password_shows_an_error(client, member):
    response = client.post(reverse("login"), {"username": "member", "password": "nope"}, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


def test_home_lists_admin_card_only_for_admins(login, tenant, member, tenant_admin):
    body = login(member, tenant).get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-card="admin"' not in body
    body = login(tenant_admin, tenant).get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert 'data-card="admin"' in body


@pytest.mark.parametrize(
    ("accept", "expected", "absent"),
    [("zh-hans", "你在这里的角色", "Your role here"), ("en", "Your role here", "你在这里的角色")],
)
def test_home_renders_in_the_browsers_language(login, member, tenant, accept, expected, absent):
    body = login(member, tenant).get(reverse("home"), HTTP_ACCEPT_LANGUAGE=accept).content.decode()
    assert expected in body
    assert absent not in body


def test_language_switcher_overrides_the_browser(login, member, tenant):
    client = login(member, tenant)
    client.post(reverse("set_language"), {"language": "en", "next": "/"}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    body = client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "Your role here" in body
    client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    assert "你在这里的角色" in client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en").content.decode()


def test_user_in_two_tenants_sees_each_tenants_data_only_while_it_is_active(client, tenant, other_tenant, rf):
    user = UserFactory(username="consultant")
    MembershipFactory(user=user, tenant=tenant, role=Role.MEMBER)
    MembershipFactory(user=user, tenant=other_tenant, role=Role.MEMBER)
    with tenant_scope(tenant):
        Project.objects.create(name="Solar farm")
    with tenant_scope(other_tenant):
        Project.objects.create(name="Noodle menu")
    client.force_login(user)

    seen = {}

    def active_projects():
        # The request's scope, as every view sees it.
        response = client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en")
        request_tenant = response.wsgi_request.tenant
        with tenant_scope(request_tenant):
            return request_tenant, [p.name for p in Project.objects.all()], response.content.decode()

    client.post(reverse("switch_tenant"), {"tenant": tenant.pk, "next": "/"})
    seen["first"] = active_projects()
    client.post(reverse("switch_tenant"), {"tenant": other_tenant.pk, "next": "/"})
    seen["second"] = active_projects()

    assert seen["first"][0] == tenant and seen["first"][1] == ["Solar farm"]
    assert seen["second"][0] == other_tenant and seen["second"][1] == ["Noodle menu"]
    # The switcher lists both tenants, with the active one selected.
    assert 'id="tenant-switcher"' in seen["second"][2]
    assert f'value="{other_tenant.pk}" selected' in seen["second"][2]


def test_switching_to_a_tenant_the_user_is_not_in_is_refused(login, member, tenant, other_tenant):
    client = login(member, tenant)
    response = client.post(reverse("switch_tenant"), {"tenant": other_tenant.pk, "next": "/"}, follow=True)
    assert response.wsgi_request.tenant == tenant
    assert client.session["active_tenant_id"] == tenant.pk


def test_a_forged_session_tenant_falls_back_to_a_real_membership(login, member, tenant, other_tenant):
    client = login(member, other_tenant)  # the session names a tenant the user is not in
    response = client.get(reverse("home"))
    assert response.wsgi_request.tenant == tenant


def test_switch_ignores_an_offsite_next_url(login, member, tenant):
    response = login(member, tenant).post(
        reverse("switch_tenant"), {"tenant": tenant.pk, "next": "https://evil.example/"}
    )
    assert response.url == reverse("home")


def test_user_without_tenant_is_told_so(client, db):
    client.force_login(UserFactory(username="loner"))
    body = client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert "not a member of any active tenant" in body


def test_superuser_without_membership_works_in_a_tenant_and_can_switch_to_any(login, superuser, tenant, other_tenant):
    client = login(superuser)
    response = client.get(reverse("home"))
    assert response.wsgi_request.tenant in (tenant, other_tenant)
    client.post(reverse("switch_tenant"), {"tenant": other_tenant.pk, "next": "/"})
    assert client.get(reverse("home")).wsgi_request.tenant == other_tenant
