from __future__ import annotations

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.models import Agent
from api.models import KeyScope


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        label=_("Name"), max_length=120, help_text=_("What the key is for, e.g. the program using it.")
    )
    scopes = forms.MultipleChoiceField(
        label=_("Scopes"),
        choices=KeyScope.choices,
        initial=[KeyScope.READ, KeyScope.CHAT],
        widget=forms.CheckboxSelectMultiple,
        help_text=_("What programs with this key may do."),
    )
    agents = forms.ModelMultipleChoiceField(
        label=_("Agents"),
        queryset=Agent.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Leave all unticked for every published agent of the tenant."),
    )
    expires_at = forms.DateField(
        label=_("Expires"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text=_("Empty: never. The key stops working at the start of this day."),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["agents"].queryset = Agent.objects.filter(active=True).order_by("name")

    def clean_expires_at(self):
        day = self.cleaned_data.get("expires_at")
        if day is not None and day <= timezone.localdate():
            raise forms.ValidationError(_("Choose a day after today."))
        return day
