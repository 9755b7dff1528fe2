"""The restaurant pack's reads and writes: the menu, a table's open order, checkout."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.packs.restaurant.models import MenuItem, Order, OrderLine, OrderStatus
from tenants.models import Tenant


class OrderError(Exception):
    """The order cannot be taken as asked; the message says why, for the user."""


def menu_list(*, tenant: Tenant, category: str = "") -> list[MenuItem]:
    items = MenuItem.objects.filter(tenant=tenant)
    if category:
        items = items.filter(category__iexact=category.strip())
    return list(items)


def menu_item_find(*, tenant: Tenant, dish: str) -> MenuItem | None:
    """The menu item named `dish` (exactly, ignoring case and spaces), else the only one whose name contains it."""
    dish = dish.strip()
    items = MenuItem.objects.filter(tenant=tenant)
    item = items.filter(name__iexact=dish).first()
    if item is not None:
        return item
    candidates = list(items.filter(Q(name__icontains=dish))[:2]) if dish else []
    return candidates[0] if len(candidates) == 1 else None


def _open_order_filter(*, conversation_id: int | None, user_id: int | None) -> dict:
    if conversation_id is not None:
        return {"conversation_id": conversation_id}
    if user_id is not None:
        return {"conversation__isnull": True, "user_id": user_id}
    raise OrderError(_("An order needs a conversation or a user."))


def order_open_get(*, tenant: Tenant, conversation_id: int | None, user_id: int | None) -> Order | None:
    """The table's open order: the conversation's, or (without one) the user's."""
    where = _open_order_filter(conversation_id=conversation_id, user_id=user_id)
    return Order.objects.filter(tenant=tenant, status=OrderStatus.OPEN, **where).order_by("-pk").first()


@dataclass
class OrderLineAdded:
    order: Order
    item: MenuItem
    quantity: int
    line_total: Decimal


@transaction.atomic
def order_add(
    *, tenant: Tenant, dish: str, quantity: int, diners: int | None = None,
    conversation_id: int | None = None, user_id: int | None = None,
) -> OrderLineAdded:  # fmt: skip
    """Add `quantity` of `dish` to the table's open order (opened if needed). Raises OrderError for a dish that
    is not on the menu or is sold out."""
    if quantity < 1:
        raise OrderError(_("The quantity must be at least 1."))
    item = menu_item_find(tenant=tenant, dish=dish)
    if item is None:
        names = "、".join(i.name for i in MenuItem.objects.filter(tenant=tenant, sold_out=False))
        raise OrderError(
            _("%(dish)s is not on the menu. The dishes are: %(names)s.") % {"dish": dish, "names": names or "-"}
        )
    if item.sold_out:
        raise OrderError(_("Sorry, %(dish)s is sold out today.") % {"dish": item.name})
    order = order_open_get(tenant=tenant, conversation_id=conversation_id, user_id=user_id)
    if order is None:
        order = Order.objects.create(
            tenant=tenant, conversation_id=conversation_id, user_id=user_id, status=OrderStatus.OPEN
        )
    if diners:
        order.diners = diners
    line = OrderLine.objects.filter(order=order, menu_item=item).first()
    if line is None:
        OrderLine.objects.create(
            tenant=tenant, order=order, menu_item=item, name=item.name, unit_price=item.price, quantity=quantity
        )
    else:
        line.quantity += quantity
        line.save(update_fields=["quantity"])
    order.total = sum((line.amount for line in order.lines.all()), Decimal("0"))
    order.save(update_fields=["diners", "total"])
    return OrderLineAdded(order=order, item=item, quantity=quantity, line_total=item.price * quantity)


@transaction.atomic
def order_checkout(*, tenant: Tenant, conversation_id: int | None = None, user_id: int | None = None) -> Order:
    """Total the table's open order and close it. Raises OrderError when there is nothing to pay."""
    order = order_open_get(tenant=tenant, conversation_id=conversation_id, user_id=user_id)
    if order is None or not order.lines.exists():
        raise OrderError(_("There is no open order to pay: nothing has been ordered yet."))
    order.total = sum((line.amount for line in order.lines.all()), Decimal("0"))
    order.status = OrderStatus.PAID
    order.closed_at = timezone.now()
    order.save(update_fields=["total", "status", "closed_at"])
    return order
