"""Django admin's own phrases that this project's catalog translates again (LOCALE_PATHS comes before Django's):
Django's Chinese puts a space between the verb and the model's name ("增加 模型服务商"). Named here so that
`make messages` keeps them in locale/; nothing imports this module."""

from django.utils.translation import gettext_noop

ADMIN_PHRASES = (
    gettext_noop("Add %s"),
    gettext_noop("Change %s"),
    gettext_noop("View %s"),
    gettext_noop("Select %s"),
    gettext_noop("Select %s to change"),
    gettext_noop("Add another %(verbose_name)s"),
    gettext_noop("Add %(name)s"),
)
