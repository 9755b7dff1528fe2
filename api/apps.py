from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = _("API")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from api.models import ApiKey
        from tenants.access import may_administer
        from tenants.generation import bump_on_change
        from tenants.navigation import HomeCard, register_card

        bump_on_change(ApiKey)  # what requests keep of a key (api.keys): revoked, expired, its agents

        register_card(
            HomeCard(
                key="api",
                title=_("API keys"),
                description=_("Keys for programs: the REST API and the OpenAI-compatible endpoint onto each agent."),
                url_name="api:keys",
                order=800,
                visible=lambda request: (
                    request.tenant is not None and may_administer(user=request.user, membership=request.membership)
                ),
            )
        )
