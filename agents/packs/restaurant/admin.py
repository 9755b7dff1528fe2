from django.contrib import admin

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
    list_display = ["__str__", "status", "diners", "total", "user", "created_at", "closed_at"]
    list_filter = ["status", "created_at"]
    readonly_fields = ["conversation", "user", "total", "created_at", "closed_at"]
    inlines = [OrderLineInline]
