"""Forms of the knowledge pages: a knowledge base's settings, an upload of several files, a search."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from knowledge.models import EmbedderKind, KnowledgeBase
from knowledge.parsing import supported_extensions

EMBEDDER_NOTES = {
    EmbedderKind.LOCAL_MULTILINGUAL: _(
        "Runs on this server, offline. Reads Chinese, English and about 90 other languages, so a question finds "
        "passages that say the same thing in other words. Ingestion is slower than with the English-only model."
    ),
    EmbedderKind.LOCAL: _(
        "Runs on this server, offline. The model understands English only: Chinese text is still found by keyword "
        "search, but not by meaning."
    ),
    EmbedderKind.PROVIDER: _(
        "The embeddings endpoint of the tenant's default model provider. For Chinese semantic search use a "
        "multilingual model such as bge-m3, served by Ollama or vLLM."
    ),
}


def check_chunk_settings(form: forms.BaseForm, cleaned: dict) -> None:
    """The overlap must be smaller than the chunk size (also checked by the services)."""
    size, overlap = cleaned.get("chunk_size"), cleaned.get("chunk_overlap")
    if size is not None and overlap is not None and overlap >= size:
        form.add_error(
            "chunk_overlap",
            _("The overlap must be smaller than the chunk size (%(size)s tokens).") % {"size": size},
        )


class KnowledgeBaseForm(forms.ModelForm):
    # Shown (and required) only when a change would re-ingest every document.
    confirm_reingest = forms.BooleanField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = KnowledgeBase
        fields = ["name", "description", "embedder", "embedding_model", "chunk_size", "chunk_overlap"]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3}),
            "embedder": forms.RadioSelect,
            "embedding_model": forms.TextInput(attrs={"placeholder": "bge-m3"}),
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["chunk_size"].help_text = _(
            "Tokens per chunk (32-2000). About 200 suits the local models: the English one reads at most 256 of its "
            "own tokens, the multilingual one 512."
        )
        self.fields["chunk_overlap"].help_text = _(
            "Tokens each chunk repeats from the one before it, in whole sentences; smaller than the chunk size."
        )

    def clean(self):
        cleaned = super().clean()
        check_chunk_settings(self, cleaned)
        return cleaned

    def embedder_options(self) -> list[dict]:
        """Each embedder's radio button with its note (English-only, or the recommendation for Chinese)."""
        return [{"radio": radio, "note": EMBEDDER_NOTES.get(radio.data["value"], "")} for radio in self["embedder"]]

    def service_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.Meta.fields if name != "name"}


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's documented pattern); each is checked by the upload service."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault(
            "widget", MultipleFileInput(attrs={"accept": ",".join(f".{e}" for e in supported_extensions())})
        )
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)] if data else []


class UploadForm(forms.Form):
    files = MultipleFileField(label=_("Files"))

    def clean_files(self):
        files = self.cleaned_data["files"]
        if not files:
            raise forms.ValidationError(_("Choose one or more files to upload."))
        return files


class SearchForm(forms.Form):
    MODES = [
        ("hybrid", _("Hybrid (vector and keyword, fused)")),
        ("vector", _("Vector (by meaning)")),
        ("keyword", _("Keyword (BM25)")),
    ]

    q = forms.CharField(label=_("Query"), max_length=1000)
    mode = forms.ChoiceField(label=_("Mode"), choices=MODES, initial="hybrid")
    top_k = forms.IntegerField(label=_("Number of results"), min_value=1, max_value=50, initial=5)
