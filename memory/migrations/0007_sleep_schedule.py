"""The schedule of seed 3's sleep for every memory key (memory.sleep_all), every 6 hours, in django-celery-beat's
tables: operators see it, change its interval or switch it off in the admin (Periodic tasks)."""

from django.db import migrations

TASK_NAME = "Memory sleep / 记忆睡眠 (seed 3 S())"


def add_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=6, period="hours")
    PeriodicTask.objects.get_or_create(
        name=TASK_NAME,
        defaults={
            "task": "memory.sleep_all",
            "interval": every,
            "enabled": True,
            "description": "Forgets what is due and dreams of it (memory.longterm.strength.sleep), per memory key.",
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0006_long_term_memory"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(add_schedule, remove_schedule)]
