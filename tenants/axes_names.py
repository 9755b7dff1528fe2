"""django-axes (login throttling) in the admin in the platform's languages: axes ships no zh-hans catalogue and its
app has no verbose name. The strings below are axes's own msgids, listed so that makemessages keeps their
translations in the project's catalogue (which Django consults before the app's)."""

from __future__ import annotations

from django.apps import apps
from django.utils.translation import gettext_lazy, gettext_noop

AXES_STRINGS = (
    gettext_noop("access attempt"),
    gettext_noop("access attempts"),
    gettext_noop("access attempt expiration"),
    gettext_noop("access attempt expirations"),
    gettext_noop("access failure"),
    gettext_noop("access failures"),
    gettext_noop("access log"),
    gettext_noop("access logs"),
    gettext_noop("Access Attempt"),
    gettext_noop("Access lock out"),
    gettext_noop("Attempt Remaining"),
    gettext_noop("Attempt Time"),
    gettext_noop("Clean up expired attempts"),
    gettext_noop("Expires At"),
    gettext_noop("Failed Logins"),
    gettext_noop("Form Data"),
    gettext_noop("GET Data"),
    gettext_noop("HTTP Accept"),
    gettext_noop("IP Address"),
    gettext_noop("Locked Out"),
    gettext_noop("Logout Time"),
    gettext_noop("Meta Data"),
    gettext_noop("Not set"),
    gettext_noop("POST Data"),
    gettext_noop("Path"),
    gettext_noop("Session key hash (sha256)"),
    gettext_noop("The time when access attempt expires and is no longer valid."),
    gettext_noop("User Agent"),
)


def name_axes_app() -> None:
    """Give the axes app a translated name in the admin (it is "Axes" otherwise), when it is installed."""
    if apps.is_installed("axes"):
        apps.get_app_config("axes").verbose_name = gettext_lazy("Login attempts")
