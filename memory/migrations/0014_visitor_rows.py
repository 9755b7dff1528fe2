"""The widget's visitors: "<embed>.<hash>" strings become memory.Visitor rows; what page loads made before any
message goes (see 0013)."""

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

    dependencies = [("memory", "0013_visitor")]

    operations = [
        migrations.RunPython(forget_page_loads, migrations.RunPython.noop),
        migrations.RunPython(visitors_from_keys, keys_from_visitors),
    ]
