from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext_lazy as _

from agents.packs.restaurant.models import MenuItem, Order, OrderLine
from tenants.admin import TenantOwnedAdmin, TenantOwnedAdminMixin


@admin.register(MenuItem)
class MenuItemAdmin(TenantOwnedAdmin):
    list_display = ["name", "category", "price", "spicy", "sold_out", "position"]
    list_editable = ["sold_out"]
    list_filter = ["category", "sold_out", "spicy"]
    search_fields = ["name", "description"]


class OrderLineInline(TenantOwnedAdminMixin, admin.TabularInline):
    model = OrderLine
    extra = 0
    fields = ["name", "unit_price", "quantity"]
    readonly_fields = fields


@admin.register(Order)
class OrderAdmin(TenantOwnedAdmin):
    # The number (the status has its column) and short times: the long ones pushed the last column out at 1280 px.
    list_display = ["number", "status", "diners", "total", "user", "created", "paid"]
    list_filter = ["status", "created_at"]
    readonly_fields = ["conversation", "user", "total", "created_at", "closed_at"]
    inlines = [OrderLineInline]

    @admin.display(description=_("order"), ordering="pk")
    def number(self, order: Order) -> str:
        return f"#{order.pk}"

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, order: Order) -> str:
        return _short(order.created_at)

    @admin.display(description=_("paid at"), ordering="closed_at")
    def paid(self, order: Order) -> str:
        return _short(order.closed_at)


def _short(moment: datetime | None) -> str:
    """A time in the locale's short form (2026/11/27 3:46 in zh-hans), or "-" like the admin's empty value."""
    return date_format(timezone.localtime(moment), "SHORT_DATETIME_FORMAT") if moment else "-"
