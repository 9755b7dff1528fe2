#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # manage.py on a machine with no configuration is the development path (migrations, seed_demo, checks);
    # a deployment sets DJANGO_SECRET_KEY, and then DEBUG stays off unless DJANGO_DEBUG says otherwise.
    if "DJANGO_SECRET_KEY" not in os.environ and "DJANGO_DEBUG" not in os.environ:
        os.environ["DJANGO_DEBUG"] = "1"
    from django.core.management import execute_from_command_line  # noqa: PLC0415 - Django's manage.py: settings first

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
