from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = _("Knowledge bases")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from knowledge.demo import seed_demo_knowledge
        from knowledge.services import tenant_knowledge_delete
        from tenants.demo import register_demo_seeder
        from tenants.navigation import HomeCard, register_card
        from tenants.services import register_tenant_cleanup

        # Every member sees and searches the knowledge bases; owners and admins change them.
        register_card(
            HomeCard(
                key="knowledge",
                title=_("Knowledge"),
                description=_("Knowledge bases: upload documents, watch them being ingested, try searches."),
                url_name="knowledge:list",
                order=40,
            )
        )
        register_demo_seeder(seed_demo_knowledge)
        # A tenant's deletion goes through its knowledge bases' own, which removes their files and vector indexes.
        register_tenant_cleanup(tenant_knowledge_delete)
