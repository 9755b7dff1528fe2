"""The cards of the home page. Each app registers what a user can do with it, in its AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import Promise

from core.registry import Registry


@dataclass(frozen=True)
class HomeCard:
    key: str
    title: str | Promise
    description: str | Promise
    url_name: str
    order: int = 100
    # Who sees the card; by default every member of the active tenant.
    visible: Callable[[HttpRequest], bool] = lambda request: request.tenant is not None

    def url(self) -> str:
        return reverse(self.url_name)


_cards: Registry[HomeCard] = Registry("the home page cards (tenants.navigation)", order=lambda card: card.order)


def register_card(card: HomeCard) -> None:
    _cards.register(card.key, card)


def cards_for(request: HttpRequest) -> list[HomeCard]:
    return [card for card in _cards if card.visible(request)]
