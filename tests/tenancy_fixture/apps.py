from django.apps import AppConfig


class TenancyFixtureConfig(AppConfig):
    name = "tests.tenancy_fixture"
    label = "tenancy_fixture"
    default_auto_field = "django.db.models.BigAutoField"
