"""Forms of the memory page: which agent's memory to show, and a search."""

from __future__ import annotations

from collections.abc import Sequence

from django import forms
from django.utils.translation import gettext_lazy as _

from memory.longterm.selectors import MemoryKey


class MemoryFilterForm(forms.Form):
    key = forms.ChoiceField(label=_("Agent"), required=False)
    q = forms.CharField(label=_("Search"), max_length=500, required=False, strip=True)

    def __init__(self, *args, keys: Sequence[MemoryKey], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Only the user's own keys are choices: another user's key is an invalid choice, never a filter.
        self.fields["key"].choices = [("", _("All agents")), *((item.key, item.label) for item in keys)]

    def chosen_key(self) -> str | None:
        return (self.cleaned_data.get("key") or None) if self.is_valid() else None

    def query(self) -> str:
        return (self.cleaned_data.get("q") or "") if self.is_valid() else ""
