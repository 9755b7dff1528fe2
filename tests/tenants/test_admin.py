"""The admin as control room (T3): tenant admins see and edit only their tenant; superusers see all."""

import pytest
from axes.models import AccessAttempt
from django.urls import reverse

from tenants.models import Membership, Role
from tenants.scope import all_tenants, tenant_scope
from tests.factories import MembershipFactory, UserFactory
from tests.tenancy_fixture.models import Project, Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(tenant, other_tenant):
    with tenant_scope(tenant):
        mine = Project.objects.create(name="Solar farm")
        my_task = Task.objects.create(project=mine, title="Size the inverter")
    with tenant_scope(other_tenant):
        theirs = Project.objects.create(name="Noodle menu")
        their_task = Task.objects.create(project=theirs, title="Price the noodles")
    return {"mine": mine, "theirs": theirs, "my_task": my_task, "their_task": their_task}


def _url(name, *args):
    return reverse(f"admin:tenancy_fixture_{name}", args=args)


def test_tenant_admin_lists_only_their_rows(login, tenant_admin, tenant, rows):
    client = login(tenant_admin, tenant)
    page = client.get(_url("project_changelist"))
    assert page.status_code == 200
    body = page.content.decode()
    assert "Solar farm" in body
    assert "Noodle menu" not in body
    # No tenant column or filter for a tenant admin.
    assert "column-tenant" not in body


def test_tenant_admin_cannot_open_change_or_delete_another_tenants_row(login, tenant_admin, tenant, rows):
    client = login(tenant_admin, tenant)
    theirs = rows["theirs"]
    for url in (_url("project_change", theirs.pk), _url("project_delete", theirs.pk)):
        response = client.get(url, follow=True)
        assert response.redirect_chain, "the admin must refuse, not render, another tenant's row"
        assert "Noodle menu" not in response.content.decode()
    client.post(_url("project_change", theirs.pk), {"name": "Hijacked"})
    client.post(_url("project_delete", theirs.pk), {"post": "yes"})
    client.post(
        _url("project_changelist"),
        {"action": "delete_selected", "_selected_action": [theirs.pk], "post": "yes"},
    )
    with all_tenants(reason="test: check the other tenant's row is untouched"):
        theirs.refresh_from_db()
        assert theirs.name == "Noodle menu"
        assert Project.objects.filter(pk=theirs.pk).exists()


def test_tenant_field_is_hidden_and_set_and_fk_choices_are_limited(login, tenant_admin, tenant, other_tenant, rows):
    client = login(tenant_admin, tenant)
    form_page = client.get(_url("task_add")).content.decode()
    assert 'name="tenant"' not in form_page
    assert "Solar farm" in form_page
    assert "Noodle menu" not in form_page

    # Choosing the other tenant's project is refused as an invalid choice; forcing a tenant is ignored.
    response = client.post(
        _url("task_add"), {"project": rows["theirs"].pk, "title": "Planted", "tenant": other_tenant.pk}
    )
    assert response.status_code == 200
    assert "errorlist" in response.content.decode()
    response = client.post(
        _url("task_add"), {"project": rows["mine"].pk, "title": "Check cables", "tenant": other_tenant.pk}
    )
    assert response.status_code == 302
    with all_tenants(reason="test: inspect what was saved"):
        created = Task.objects.get(title="Check cables")
        assert created.tenant_id == tenant.pk
        assert not Task.objects.filter(title="Planted").exists()


def test_member_without_staff_rights_cannot_open_the_admin(login, member, tenant):
    client = login(member, tenant)
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert reverse("admin:login") in response.url
    assert client.get(_url("project_changelist")).status_code == 302


def test_staff_user_who_is_only_a_member_of_the_active_tenant_is_refused(login, tenant, other_tenant, rows):
    # Admin in the other tenant, member here: while this tenant is active, the admin is closed.
    user = UserFactory(username="two-hats", is_staff=True)
    MembershipFactory(user=user, tenant=tenant, role=Role.MEMBER)
    MembershipFactory(user=user, tenant=other_tenant, role=Role.ADMIN)
    client = login(user, tenant)
    assert client.get(_url("project_changelist")).status_code == 302
    client = login(user, other_tenant)
    body = client.get(_url("project_changelist")).content.decode()
    assert "Noodle menu" in body and "Solar farm" not in body


def test_superuser_sees_every_tenant_with_a_tenant_column_and_filter(login, superuser, rows, tenant):
    client = login(superuser)
    body = client.get(_url("project_changelist")).content.decode()
    assert "Solar farm" in body and "Noodle menu" in body
    assert "column-tenant" in body
    assert "tenant__id__exact" in body
    body = client.get(_url("project_change", rows["theirs"].pk)).content.decode()
    assert "Noodle menu" in body


def test_superuser_cannot_point_a_row_at_another_tenants_row(login, superuser, tenant, rows):
    client = login(superuser)
    response = client.post(_url("task_add"), {"tenant": tenant.pk, "project": rows["theirs"].pk, "title": "Crossed"})
    assert response.status_code == 200
    assert "Choose an item of this tenant" in response.content.decode() or "选择本租户" in response.content.decode()


def test_tenant_admin_sees_only_their_tenant_and_cannot_change_its_budget(login, tenant_admin, tenant, other_tenant):
    client = login(tenant_admin, tenant)
    body = client.get(reverse("admin:tenants_tenant_changelist")).content.decode()
    assert tenant.name in body and other_tenant.name not in body
    assert client.get(reverse("admin:tenants_tenant_change", args=[other_tenant.pk])).status_code in (302, 403, 404)
    page = client.get(reverse("admin:tenants_tenant_change", args=[tenant.pk]))
    assert page.status_code == 200
    assert 'name="monthly_token_budget"' not in page.content.decode()


def test_tenant_admin_adds_a_member_by_username(login, tenant_admin, tenant):
    newcomer = UserFactory(username="newcomer")
    client = login(tenant_admin, tenant)
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    memberships = list(Membership.objects.filter(tenant=tenant).order_by("pk"))
    data = {
        "name": tenant.name,
        "memberships-TOTAL_FORMS": str(len(memberships) + 1),
        "memberships-INITIAL_FORMS": str(len(memberships)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for i, m in enumerate(memberships):
        data |= {
            f"memberships-{i}-id": str(m.pk),
            f"memberships-{i}-tenant": str(tenant.pk),
            f"memberships-{i}-username": m.user.username,
            f"memberships-{i}-role": m.role,
        }
    n = len(memberships)
    data |= {
        f"memberships-{n}-tenant": str(tenant.pk),
        f"memberships-{n}-username": "newcomer",
        f"memberships-{n}-role": "owner",
    }
    response = client.post(url, data)
    # An admin (not an owner) may not grant the owner role.
    assert response.status_code == 200
    assert not Membership.objects.filter(user=newcomer).exists()
    data[f"memberships-{n}-role"] = "member"
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Membership.objects.get(user=newcomer).tenant == tenant


def _tenant_page(tenant, *, changes=None, new=(), delete=(), name=None) -> dict:
    """The tenant page's POST: its members' rows as they are (with `changes` by username), plus `new` rows."""
    memberships = list(Membership.objects.filter(tenant=tenant).select_related("user").order_by("pk"))
    data = {
        "name": name or tenant.name,
        "memberships-TOTAL_FORMS": str(len(memberships) + len(new)),
        "memberships-INITIAL_FORMS": str(len(memberships)),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    for i, m in enumerate(memberships):
        row = {"username": m.user.username, "role": m.role, **(changes or {}).get(m.user.username, {})}
        data |= {f"memberships-{i}-id": str(m.pk), f"memberships-{i}-tenant": str(tenant.pk)}
        data |= {f"memberships-{i}-{key}": value for key, value in row.items()}
        if m.user.username in delete:
            data[f"memberships-{i}-DELETE"] = "on"
    for j, (username, role) in enumerate(new, start=len(memberships)):
        data |= {f"memberships-{j}-tenant": str(tenant.pk), f"memberships-{j}-username": username,
                 f"memberships-{j}-role": role}  # fmt: skip
    return data


@pytest.fixture
def owned(tenant, tenant_admin):
    owner = UserFactory(username="the-owner")
    Membership.objects.create(user=owner, tenant=tenant, role="owner")
    return owner


def test_an_admin_saves_the_tenant_page_with_its_owner_untouched(login, tenant_admin, tenant, owned):
    """The probe's finding: any save by a non-owner admin failed once the tenant had an owner."""
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    response = login(tenant_admin, tenant).post(url, _tenant_page(tenant, name="能源示范（新）"))
    assert response.status_code == 302, response.content.decode()[:1500]
    tenant.refresh_from_db()
    assert tenant.name == "能源示范（新）"


def test_an_admin_cannot_demote_or_remove_the_owner(login, tenant_admin, tenant, owned):
    client = login(tenant_admin, tenant)
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    demoted = client.post(
        url, _tenant_page(tenant, changes={"the-owner": {"role": "member"}}), HTTP_ACCEPT_LANGUAGE="en"
    )
    assert (
        demoted.status_code == 200 and "Only an owner can grant or change the owner role." in demoted.content.decode()
    )
    removed = client.post(url, _tenant_page(tenant, delete=["the-owner"]), HTTP_ACCEPT_LANGUAGE="en")
    assert removed.status_code == 200 and "Only an owner can remove an owner." in removed.content.decode()
    assert Membership.objects.get(user=owned, tenant=tenant).role == "owner"


def test_adding_a_member_does_not_tell_who_exists_elsewhere(login, tenant_admin, tenant, other_tenant):
    """The probe's finding: an admin learnt which usernames exist on the platform by adding them."""
    elsewhere = UserFactory(username="in-another-tenant")
    Membership.objects.create(user=elsewhere, tenant=other_tenant, role="member")
    client = login(tenant_admin, tenant)
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    answers = [
        client.post(url, _tenant_page(tenant, new=[(username, "member")]), HTTP_ACCEPT_LANGUAGE="en").content.decode()
        for username in ("in-another-tenant", "nobody-at-all")
    ]
    for username, answer in zip(("in-another-tenant", "nobody-at-all"), answers, strict=True):
        assert f"No user named “{username}” can be added here." in answer
    assert not Membership.objects.filter(user=elsewhere, tenant=tenant).exists()
    UserFactory(username="fresh-account")  # made by the operator for this tenant: belongs nowhere yet
    added = client.post(url, _tenant_page(tenant, new=[("fresh-account", "member")]))
    assert added.status_code == 302


def test_view_on_site_does_not_tell_whether_another_tenants_id_exists(login, tenant_admin, tenant, other_tenant,
                                                                     settings):  # fmt: skip
    """The probe's finding (debug mode): /admin/r/<type>/<id>/ answered differently for another tenant's id."""
    from django.contrib.contenttypes.models import ContentType

    from agents.services import agent_create
    from tenants.scope import tenant_scope

    settings.DEBUG = True
    with tenant_scope(other_tenant):
        theirs = agent_create(tenant=other_tenant, name="Noodle chef")
    content_type = ContentType.objects.get(app_label="agents", model="agent")
    client = login(tenant_admin, tenant)
    existing = client.get(f"/admin/r/{content_type.pk}/{theirs.pk}/", HTTP_ACCEPT_LANGUAGE="en")
    missing = client.get(f"/admin/r/{content_type.pk}/{theirs.pk + 1000}/", HTTP_ACCEPT_LANGUAGE="en")
    assert existing.status_code == missing.status_code == 404
    assert b"Nothing to show on the site." in existing.content and b"Nothing to show on the site." in missing.content


def test_the_login_throttling_section_of_the_admin_reads_in_chinese(login, superuser):
    """A newcomer's finding: django-axes's app and models showed in English on the zh-hans admin."""
    client = login(superuser)
    client.defaults["HTTP_ACCEPT_LANGUAGE"] = "zh-hans"
    index = client.get(reverse("admin:index")).content.decode()
    assert "登录尝试" in index and "登录日志" in index and "登录失败记录" in index
    for english in (">Axes<", "Access attempts", "Access logs", "Access failures"):
        assert english not in index, english
    # bulk_create: no post_save signal, which axes' cache handler (the one used with REDIS_URL) does not take.
    AccessAttempt.objects.bulk_create([AccessAttempt(
        user_agent="curl", ip_address="10.0.0.1", username="root", http_accept="*/*", path_info="/accounts/login/",
        get_data="", post_data="", failures_since_start=1,
    )])  # fmt: skip
    changelist = client.get(reverse("admin:axes_accessattempt_changelist")).content.decode()
    assert "IP 地址" in changelist and "尝试时间" in changelist and "IP Address" not in changelist
