"""Long-term memory's default embedder is now "auto" (MEMORY_EMBEDDER): each text by the model that reads its
language, the English model for Latin script and the multilingual one for the rest (was the English-only model for
everything). The rows stored before are embedded again here where that changes their model (Chinese rows), so their
vectors are searched at once rather than only by keyword. Nothing to do on a new installation, or when
MEMORY_EMBEDDER keeps the English model. Progress is printed per batch; a model failure leaves the rest to
`python manage.py reembed_memory`."""

import sys

from django.db import migrations

from memory.longterm.reembed import reembed


def _progress(table: str, done: int) -> None:
    sys.stdout.write(f"\n  long-term memory, {table}: {done} embedded again")
    sys.stdout.flush()


def reembed_rows(apps, schema_editor):
    tables = [apps.get_model("memory", name) for name in ("Event", "MemoryItem", "TurnMemory")]
    result = reembed(tables, progress=_progress)
    if result.failed:
        sys.stdout.write(
            f"\n  long-term memory: the model failed on {result.failed}; "
            "run `python manage.py reembed_memory` when it works (until then those rows are found by keyword)."
        )


class Migration(migrations.Migration):
    dependencies = [("memory", "0017_eval_source")]

    operations = [migrations.RunPython(reembed_rows, migrations.RunPython.noop, elidable=True)]
