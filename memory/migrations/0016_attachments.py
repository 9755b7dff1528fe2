"""Files and images in conversations (issue 37): Attachment, its passages, the context's count of files; and the
daily schedule of memory.attachments_expire (ATTACHMENT_RETENTION_DAYS; nothing to do while it is 0), in
django-celery-beat's tables where operators see and change it."""

import django.db.models.deletion
import knowledge.fields
import memory.models
import memory.storage
from django.conf import settings
from django.db import migrations, models


EXPIRE_TASK_NAME = "Attachments retention / 附件保留期 (ATTACHMENT_RETENTION_DAYS)"


def add_schedule(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every, _ = IntervalSchedule.objects.get_or_create(every=1, period="days")
    PeriodicTask.objects.get_or_create(
        name=EXPIRE_TASK_NAME,
        defaults={
            "task": "memory.attachments_expire",
            "interval": every,
            "enabled": True,
            "description": "Deletes conversations' files older than ATTACHMENT_RETENTION_DAYS (0: keeps them).",
        },
    )


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=EXPIRE_TASK_NAME).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0015_visitor_key_removed'),
        ('tenants', '0002_tenant_packs'),
        ('django_celery_beat', '0019_alter_periodictasks_options'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='conversationcontext',
            name='attachments',
            field=models.PositiveIntegerField(default=0, help_text="Files sent with the conversation's messages so far.", verbose_name='files sent'),
        ),
        migrations.CreateModel(
            name='Attachment',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=255, verbose_name='name')),
                ('kind', models.CharField(choices=[('image', 'image'), ('document', 'document')], max_length=10, verbose_name='kind')),
                ('content_type', models.CharField(max_length=100, verbose_name='content type')),
                ('size', models.PositiveBigIntegerField(default=0, verbose_name='bytes')),
                ('sha256', models.CharField(max_length=64, verbose_name='SHA-256')),
                ('file', models.FileField(max_length=200, storage=memory.storage.attachment_storage, upload_to=memory.models.attachment_path, verbose_name='file')),
                ('width', models.PositiveIntegerField(default=0, verbose_name='width')),
                ('height', models.PositiveIntegerField(default=0, verbose_name='height')),
                ('pages', models.PositiveIntegerField(default=0, verbose_name='pages')),
                ('text', models.TextField(blank=True, verbose_name='text read')),
                ('from_ocr', models.BooleanField(default=False, verbose_name='read by OCR')),
                ('token_count', models.PositiveIntegerField(default=0, help_text="What the file adds to its message in the model's request.", verbose_name='tokens')),
                ('indexed', models.BooleanField(default=False, help_text='A large document: each turn gets its best passages instead.', verbose_name='indexed')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='uploaded')),
                ('conversation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='attachments', to='memory.conversation', verbose_name='conversation')),
                ('message', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='attachments', to='memory.message', verbose_name='message')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant', verbose_name='tenant')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL, verbose_name='uploaded by')),
            ],
            options={
                'verbose_name': 'attachment',
                'verbose_name_plural': 'attachments',
                'ordering': ['id'],
            },
        ),
        migrations.CreateModel(
            name='AttachmentPassage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('position', models.PositiveIntegerField(verbose_name='position')),
                ('page', models.PositiveIntegerField(blank=True, null=True, verbose_name='page')),
                ('text', models.TextField(verbose_name='text')),
                ('token_count', models.PositiveIntegerField(default=0, verbose_name='tokens')),
                ('terms', models.TextField(blank=True, editable=False, verbose_name='keyword terms')),
                ('embedding', knowledge.fields.EmbeddingField(blank=True, editable=False, null=True, verbose_name='embedding')),
                ('embedder', models.CharField(blank=True, editable=False, max_length=200, verbose_name='embedder')),
                ('attachment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='passages', to='memory.attachment', verbose_name='attachment')),
                ('conversation', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='memory.conversation', verbose_name='conversation')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tenants.tenant', verbose_name='tenant')),
            ],
            options={
                'verbose_name': 'attachment passage',
                'verbose_name_plural': 'attachment passages',
                'ordering': ['attachment', 'position'],
            },
        ),
        migrations.AddIndex(
            model_name='attachment',
            index=models.Index(fields=['created_at'], name='memory_attachment_created'),
        ),
        migrations.AddIndex(
            model_name='attachmentpassage',
            index=models.Index(fields=['tenant', 'conversation', 'id'], name='memory_passage_conv'),
        ),
        migrations.RunPython(add_schedule, remove_schedule),
    ]
