"""Website visitors become rows (memory.Visitor) instead of a "<embed>.<hash>" string on the conversation (this
migration adds the table and the key; 0014 moves the data; 0015 drops the string). Three migrations, so that the
data moved in one transaction is not altered in the same one (PostgreSQL: "pending trigger events")."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("memory", "0012_message_trace_parent"),
        ("tenants", "0002_tenant_packs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Visitor",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("embed_id", models.BigIntegerField(db_index=True, verbose_name="embed token id")),
                ("id_hash", models.CharField(max_length=64, verbose_name="hash of the visitor's id")),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="first message")),
                ("tenant", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                             to="tenants.tenant", verbose_name="tenant")),
                ("user", models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name="+",
                                              to=settings.AUTH_USER_MODEL, verbose_name="account")),
            ],
            options={"verbose_name": "website visitor", "verbose_name_plural": "website visitors"},
        ),
        migrations.AddConstraint(
            model_name="visitor",
            constraint=models.UniqueConstraint(fields=("embed_id", "id_hash"), name="memory_visitor_embed_hash"),
        ),
        migrations.RenameField(model_name="conversation", old_name="visitor", new_name="visitor_key"),
        migrations.AddField(
            model_name="conversation",
            name="visitor",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                                    related_name="conversations", to="memory.visitor",
                                    verbose_name="website visitor"),
        ),
    ]
