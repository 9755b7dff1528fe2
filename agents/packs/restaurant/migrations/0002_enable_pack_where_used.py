"""Packs became tenant features (tenants.packs): a tenant that already has menu items or orders, or names one of
the pack's tools in an agent, a version or a workflow, keeps the restaurant pack. New tenants start without it."""

from django.db import migrations

from agents.packs.adoption import enable_where_used

# The pack's tools and workflow functions as they were when packs became tenant features.
TOOLS = (
    "menu",
    "order",
    "checkout",
    "filter_spicy_dishes",
    "plugin_user_info_by_tag_get",
    "plugin_marketing_article_generate",
    "plugin_sms_send",
)


def enable(apps, schema_editor) -> None:
    enable_where_used(
        apps, pack="restaurant", tool_names=TOOLS, models=[("restaurant", "MenuItem"), ("restaurant", "Order")]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("restaurant", "0001_initial"),
        ("tenants", "0002_tenant_packs"),
        ("agents", "0011_memory_extraction_combined"),
    ]

    # Going back leaves the packs as they are (the field itself goes with tenants' own migration).
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
