"""The memory page (outside the admin): what the agents remember of the logged-in user, in the active tenant.

Everyone sees their own memory only: the event graph (a table and a picture), the vector memories and the
dreams, by agent; a search that changes nothing; deleting one event or memory, and forgetting everything, each
after a confirmation page. Another user's event or memory, of this tenant or another, is a 404 everywhere.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_http_methods

from memory.forms import MemoryFilterForm
from memory.longterm.forget import event_delete, forget_everything, memory_item_delete
from memory.longterm.selectors import (
    LIST_LIMIT,
    dreams_for_page,
    event_get,
    event_graph,
    event_relation_count,
    events_for_page,
    memory_counts,
    memory_item_get,
    memory_items_for_page,
    memory_keys,
    memory_search,
    relations_among,
)
from memory.models import Event, MemoryItem
from tenants.decorators import tenant_required


def _event_or_404(request: HttpRequest, event_id: int) -> Event:
    try:
        return event_get(user_id=request.user.pk, event_id=event_id)
    except Event.DoesNotExist:
        raise Http404(_("No such event in your memory.")) from None


def _memory_item_or_404(request: HttpRequest, item_id: int) -> MemoryItem:
    try:
        return memory_item_get(user_id=request.user.pk, item_id=item_id)
    except MemoryItem.DoesNotExist:
        raise Http404(_("No such memory in your memory.")) from None


def _with_agent_labels(rows, labels: dict[str, str]):
    """Each row with `agent_label`, the name of the memory it belongs to (for the tables' agent column)."""
    for row in rows:
        row.agent_label = labels.get(row.key, row.key)
    return rows


def _index_url(key: str = "") -> str:
    url = reverse("memory:index")
    return f"{url}?{urlencode({'key': key})}" if key else url


@tenant_required
@require_GET
def memory_index(request: HttpRequest) -> HttpResponse:
    user_id = request.user.pk
    keys = memory_keys(user_id=user_id)
    form = MemoryFilterForm(request.GET or None, keys=keys)
    key, query = form.chosen_key(), form.query()
    events, event_total = events_for_page(user_id=user_id, key=key)
    items, item_total = memory_items_for_page(user_id=user_id, key=key)
    search = memory_search(tenant_id=request.tenant.pk, user_id=user_id, query=query, key=key) if query else None
    labels = {item.key: item.label for item in keys}
    _with_agent_labels(events, labels)
    _with_agent_labels(items, labels)
    if search is not None:
        _with_agent_labels([row for row, _score in (*search.events, *search.memories)], labels)
    return render(
        request,
        "memory/index.html",
        {
            "form": form,
            "keys": keys,
            "key": key or "",
            "query": query,
            "search": search,
            "events": events,
            "event_total": event_total,
            "graph": event_graph(events, relations_among(events)),
            "items": items,
            "item_total": item_total,
            "list_limit": LIST_LIMIT,
            "dreams": _with_agent_labels(dreams_for_page(user_id=user_id, key=key), labels),
        },
    )


@tenant_required
@require_http_methods(["GET", "POST"])
def event_delete_view(request: HttpRequest, event_id: int) -> HttpResponse:
    event = _event_or_404(request, event_id)
    if request.method == "POST":
        key = event.key
        event_delete(event=event)
        messages.success(request, _("Deleted the event “%(summary)s”.") % {"summary": event.content_summary[:80]})
        return HttpResponseRedirect(_index_url(key))
    return render(
        request,
        "memory/confirm_delete.html",
        {"event": event, "item": None, "relation_count": event_relation_count(event=event), "cancel_url": _index_url()},
    )


@tenant_required
@require_http_methods(["GET", "POST"])
def memory_item_delete_view(request: HttpRequest, item_id: int) -> HttpResponse:
    item = _memory_item_or_404(request, item_id)
    if request.method == "POST":
        key = item.key
        memory_item_delete(item=item)
        messages.success(request, _("Deleted the memory “%(text)s”.") % {"text": item.text[:80]})
        return HttpResponseRedirect(_index_url(key))
    return render(request, "memory/confirm_delete.html", {"event": None, "item": item, "cancel_url": _index_url()})


@tenant_required
@require_http_methods(["GET", "POST"])
def forget_view(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        deleted = forget_everything(user_id=request.user.pk)
        messages.success(
            request,
            _(
                "Everything was forgotten (events: %(events)d, relations: %(relations)d, named things: %(entities)d, "
                "memories: %(memories)d, indexed turns: %(turns)d, dreams: %(dreams)d)."
            )
            % deleted,
        )
        return HttpResponseRedirect(reverse("memory:index"))
    counts = memory_counts(user_id=request.user.pk)
    return render(request, "memory/confirm_forget.html", {"counts": counts, "nothing": not any(counts.values())})
