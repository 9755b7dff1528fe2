"""The visitor string is gone (memory.Visitor rows since 0014); MCP is a conversation source of its own."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("memory", "0014_visitor_rows")]

    operations = [
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
