"""The restaurant pack's tables: a tenant's menu, and the orders its waiter agents take."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from tenants.models import TenantOwned


class MenuItem(TenantOwned):
    """A dish or drink on the tenant's menu."""

    name = models.CharField(_("name"), max_length=100)
    category = models.CharField(_("category"), max_length=60, blank=True)
    price = models.DecimalField(
        _("price"), max_digits=8, decimal_places=2, validators=[MinValueValidator(Decimal("0"))]
    )
    description = models.CharField(_("description"), max_length=300, blank=True)
    spicy = models.BooleanField(_("spicy"), default=False)
    sold_out = models.BooleanField(_("sold out"), default=False, help_text=_("Sold-out dishes cannot be ordered."))
    position = models.PositiveIntegerField(_("position"), default=0, help_text=_("Order on the menu."))

    class Meta:
        ordering = ["position", "name"]
        verbose_name = _("menu item")
        verbose_name_plural = _("menu items")
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="restaurant_menuitem_unique_name")]

    def __str__(self) -> str:
        return self.name


class OrderStatus(models.TextChoices):
    OPEN = "open", _("open")
    PAID = "paid", _("paid")


class Order(TenantOwned):
    """A table's order: one open order per conversation (or per user without one), closed at checkout."""

    conversation = models.ForeignKey(
        "memory.Conversation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("conversation"),
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("user"),
    )
    status = models.CharField(_("status"), max_length=10, choices=OrderStatus.choices, default=OrderStatus.OPEN)
    diners = models.PositiveIntegerField(_("diners"), null=True, blank=True)
    total = models.DecimalField(_("total"), max_digits=10, decimal_places=2, default=Decimal("0"))
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    closed_at = models.DateTimeField(_("paid at"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("order")
        verbose_name_plural = _("orders")

    def __str__(self) -> str:
        return f"#{self.pk} ({self.get_status_display()})"


class OrderLine(TenantOwned):
    """A dish of an order, with its name and price as they were when it was ordered."""

    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="lines", verbose_name=_("order"))
    menu_item = models.ForeignKey(
        MenuItem, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("menu item")
    )
    name = models.CharField(_("name"), max_length=100)
    unit_price = models.DecimalField(_("unit price"), max_digits=8, decimal_places=2)
    quantity = models.PositiveIntegerField(_("quantity"), validators=[MinValueValidator(1)])

    class Meta:
        ordering = ["order", "pk"]
        verbose_name = _("order line")
        verbose_name_plural = _("order lines")

    def __str__(self) -> str:
        return f"{self.name} × {self.quantity}"

    @property
    def amount(self) -> Decimal:
        return self.unit_price * self.quantity
