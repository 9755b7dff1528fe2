"""Two tenant-owned models, installed only in tests, to exercise the tenancy layer before real apps exist."""

from django.db import models

from tenants.models import TenantOwned


class Project(TenantOwned):
    name = models.CharField(max_length=100)

    class Meta:
        app_label = "tenancy_fixture"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Task(TenantOwned):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="tasks")
    title = models.CharField(max_length=100)

    class Meta:
        app_label = "tenancy_fixture"

    def __str__(self) -> str:
        return self.title
