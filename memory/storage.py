"""Where conversations' files are kept: Django's storage alias "attachments" (config/settings.py STORAGES).

The default is the file system under ATTACHMENT_STORAGE_ROOT (default <VAR_DIR>/attachments), read each time a path
is made rather than once, so a test (or an operator's management command with other settings) that changes the
setting is obeyed. Files are private to the server process (0600), and the storage has no URL: a file is served only
through the views that check who may read its conversation. An S3-compatible store replaces this class in STORAGES
(docs/attachments.md); nothing else changes.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage, Storage, storages

from core.conf import setting

ALIAS = "attachments"


class AttachmentStorage(FileSystemStorage):
    """The file system under ATTACHMENT_STORAGE_ROOT, private files, no public URL."""

    def __init__(self, **options) -> None:
        options.setdefault("file_permissions_mode", 0o600)
        options.setdefault("directory_permissions_mode", 0o700)
        options.setdefault("base_url", None)
        super().__init__(**options)

    @property
    def base_location(self) -> str:
        root = setting("ATTACHMENT_STORAGE_ROOT")
        return str(root) if root else str(Path(getattr(settings, "VAR_DIR", settings.BASE_DIR / "var")) / ALIAS)

    @property
    def location(self) -> str:
        return str(Path(self.base_location).resolve())

    def url(self, name: str | None) -> str:
        raise ValueError("Conversation files have no public URL: serve them through the attachment view.")


def attachment_storage() -> Storage:
    """The storage of the alias "attachments" (a callable, so the model's field names the alias, not a backend)."""
    return storages[ALIAS]
