"""Packs became tenant features (tenants.packs): a tenant that names one of the energy pack's tools in an agent, a
version or a workflow keeps the energy pack. New tenants start without it."""

from django.db import migrations

from agents.packs.adoption import enable_where_used

# The pack's tools as they were when packs became tenant features.
TOOLS = ("pv_economics", "pv_sensitivity", "pv_report")


def enable(apps, schema_editor) -> None:
    enable_where_used(apps, pack="energy", tool_names=TOOLS)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("tenants", "0002_tenant_packs"),
        ("agents", "0011_memory_extraction_combined"),
    ]

    # Going back leaves the packs as they are (the field itself goes with tenants' own migration).
    operations = [migrations.RunPython(enable, migrations.RunPython.noop)]
