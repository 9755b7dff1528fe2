import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0002_agent_tools"),
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="ToolHttpAllowedHost",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "host",
                    models.CharField(
                        help_text='A host name such as "api.example.com", or "*.example.com" for every subdomain of '
                        "example.com.",
                        max_length=253,
                        verbose_name="host",
                    ),
                ),
                (
                    "note",
                    models.CharField(
                        blank=True, help_text="What the agents use this host for.", max_length=200, verbose_name="note"
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created")),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                        verbose_name="tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "allowed HTTP host",
                "verbose_name_plural": "allowed HTTP hosts",
                "ordering": ["host"],
                "constraints": [models.UniqueConstraint(fields=("tenant", "host"), name="agents_httphost_unique_host")],
            },
        ),
    ]
