"""Website visitors become rows (memory.Visitor) instead of a "<embed>.<hash>" string on the conversation; MCP is a
conversation source of its own."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def forget_page_loads(apps, schema_editor):
    """Before this change the widget made an account and a conversation for every new visitor id on a page load;
    those that never got a message (and accounts left with no conversation) go."""
    Conversation = apps.get_model("memory", "Conversation")
    Message = apps.get_model("memory", "Message")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    written = Message.objects.values("conversation_id")
    empty = Conversation.objects.exclude(visitor_key="").exclude(pk__in=written)
    accounts = set(empty.values_list("user_id", flat=True))
    empty.delete()
    kept = set(Conversation.objects.filter(user_id__in=accounts).values_list("user_id", flat=True))
    User.objects.filter(pk__in=accounts - kept, is_active=False, username__startswith="visitor-").delete()


def visitors_from_keys(apps, schema_editor):
    """One Visitor per "<embed id>.<hash>" key, owned by the account its conversations already had."""
    Conversation = apps.get_model("memory", "Conversation")
    Visitor = apps.get_model("memory", "Visitor")
    made = {}
    for conversation in Conversation.objects.exclude(visitor_key="").order_by("pk").iterator():
        embed_id, _dot, id_hash = conversation.visitor_key.partition(".")
        if not embed_id.isdigit() or not id_hash:
            continue
        key = (int(embed_id), id_hash)
        if key not in made:
            made[key] = Visitor.objects.filter(embed_id=key[0], id_hash=id_hash).first() or Visitor.objects.create(
                tenant_id=conversation.tenant_id, embed_id=key[0], id_hash=id_hash, user_id=conversation.user_id
            )
        conversation.visitor_id = made[key].pk
        conversation.save(update_fields=["visitor"])


def keys_from_visitors(apps, schema_editor):
    Conversation = apps.get_model("memory", "Conversation")
    for conversation in Conversation.objects.exclude(visitor=None).select_related("visitor").iterator():
        conversation.visitor_key = f"{conversation.visitor.embed_id}.{conversation.visitor.id_hash}"
        conversation.save(update_fields=["visitor_key"])


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
        migrations.RunPython(forget_page_loads, migrations.RunPython.noop),
        migrations.RunPython(visitors_from_keys, keys_from_visitors),
        migrations.RemoveField(model_name="conversation", name="visitor_key"),
        migrations.AlterField(
            model_name="conversation",
            name="source",
            field=models.CharField(choices=[("chat", "chat page"), ("api", "API"), ("widget", "website widget"),
                                            ("mcp", "MCP")], default="chat", max_length=10, verbose_name="source"),
        ),
        migrations.AlterField(
            model_name="feedback",
            name="source",
            field=models.CharField(choices=[("chat", "chat page"), ("api", "API"), ("widget", "website widget"),
                                            ("mcp", "MCP")], max_length=10, verbose_name="source"),
        ),
    ]
