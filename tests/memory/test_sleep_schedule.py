"""Sleep runs on a schedule the platform operator sees and changes in the admin (django-celery-beat)."""

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

pytestmark = pytest.mark.django_db


def test_the_sleep_schedule_is_installed_and_names_the_task():
    task = PeriodicTask.objects.get(task="memory.sleep_all")
    assert task.enabled and (task.interval.every, task.interval.period) == (6, "hours")
    from config.celery import app

    app.loader.import_default_modules()  # what a worker does when it starts: the autodiscovered tasks
    assert app.tasks["memory.sleep_all"].name == task.task


def test_operators_see_and_change_it_in_the_admin_and_tenant_admins_do_not(
    client, superuser, login, tenant_admin, tenant
):
    task = PeriodicTask.objects.get(task="memory.sleep_all")
    client.force_login(superuser)
    page = client.get(reverse("admin:django_celery_beat_periodictask_changelist"))
    assert page.status_code == 200 and task.name in page.content.decode()
    change = client.get(reverse("admin:django_celery_beat_periodictask_change", args=[task.pk]))
    assert change.status_code == 200

    client.logout()
    admin_client = login(tenant_admin, tenant)
    refused = admin_client.get(reverse("admin:django_celery_beat_periodictask_changelist"))
    assert refused.status_code in (302, 403)
