from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LlmConfig(AppConfig):
    name = "llm"
    verbose_name = _("Models")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from llm import usage
        from llm.demo import seed_demo_providers
        from llm.models import ModelProvider
        from tenants.admin import register_tenant_usage
        from tenants.demo import register_demo_seeder
        from tenants.generation import bump_on_change

        bump_on_change(ModelProvider)  # the providers of the agents' configurations requests keep (agents.config)
        register_tenant_usage(usage)
        register_demo_seeder(seed_demo_providers)
