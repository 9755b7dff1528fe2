"""The registries through which apps plug into each other: a keyed `Registry` and a single-value `Slot`.

A lower floor that needs something of a higher one (a page URL, a turn runner, a demo seeder) declares a registry
or a slot; the higher app fills it from its AppConfig.ready() or at import. A key taken by another registrant is
refused at once, naming both; registering the same thing again (an equal item, or the same line of the same
module, as a reloaded module does) is harmless. A required slot left empty fails `manage.py check` and start-up
(`require_slots`, called by config/asgi.py and the Celery worker), never silently at run time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")


class DuplicateRegistration(ValueError):
    """A key (or a slot) is already taken by another registrant."""


class NotRegistered(KeyError):
    """Nothing is registered under the key asked for (or in the slot)."""

    def __str__(self) -> str:
        # KeyError would print the message quoted, as a key.
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class _Entry(Generic[T]):
    item: T
    registrant: str


def _registrant(owner: str) -> str:
    """Where the registration comes from: the first caller outside this module and the registry's own module (the
    outermost line of the registry's module when that module registers its own items at import)."""
    frame = sys._getframe(2)
    last = frame
    while frame is not None and frame.f_globals.get("__name__") in (__name__, owner):
        last, frame = frame, frame.f_back
    if frame is None or frame.f_globals.get("__name__", "").startswith("importlib"):
        frame = last
    return f"{frame.f_globals.get('__name__', '?')} line {frame.f_lineno}"


def _declaring_module() -> str:
    # The module that declares the registry: the first caller outside this module (and typing, which a
    # subscripted `Registry[T](...)` goes through).
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") in (__name__, "typing"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?")


def qualified_name(obj: Any) -> str:
    """`module.qualname` of a function or class: the key of registries of callables (cleanups, seeders)."""
    return f"{obj.__module__}.{obj.__qualname__}"


class Registry(Generic[T]):
    """Items by key, in registration order (or sorted by `order`, when given)."""

    def __init__(self, name: str, *, order: Callable[[T], Any] | None = None) -> None:
        self.name = name
        self._order = order
        self._owner = _declaring_module()
        self._entries: dict[str, _Entry[T]] = {}

    def register(self, key: str, item: T) -> T:
        """Register `item` as `key`; DuplicateRegistration when another registrant has the key."""
        registrant = _registrant(self._owner)
        existing = self._entries.get(key)
        if existing is not None and existing.item != item and existing.registrant != registrant:
            raise DuplicateRegistration(
                f"{key!r} is already registered in {self.name} by {existing.registrant}; {registrant} registers "
                f"another one. Give one of them another key."
            )
        self._entries[key] = _Entry(item, registrant)
        return item

    def get(self, key: str) -> T:
        """The item of `key`; NotRegistered names the registry and what it holds."""
        entry = self._entries.get(key)
        if entry is None:
            held = ", ".join(map(repr, self._entries)) or "nothing"
            raise NotRegistered(f"No {key!r} in {self.name} (registered: {held}).")
        return entry.item

    def find(self, key: str) -> T | None:
        """The item of `key`, or None."""
        entry = self._entries.get(key)
        return entry.item if entry is not None else None

    def items(self) -> list[tuple[str, T]]:
        pairs = [(key, entry.item) for key, entry in self._entries.items()]
        if self._order is not None:
            order = self._order
            pairs.sort(key=lambda pair: order(pair[1]))
        return pairs

    def keys(self) -> list[str]:
        return [key for key, _item in self.items()]

    def values(self) -> list[T]:
        return [item for _key, item in self.items()]

    def __iter__(self) -> Iterator[T]:
        return iter(self.values())

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"<Registry {self.name}: {', '.join(self._entries)}>"

    # For tests: change the registry for a while.
    def unregister(self, key: str) -> None:
        del self._entries[key]

    @contextmanager
    def restored(self) -> Iterator[Registry[T]]:
        """Whatever happens to the registry inside the block is undone when it ends."""
        saved = dict(self._entries)
        try:
            yield self
        finally:
            self._entries = saved


_slots: list[Slot[Any]] = []


class Slot(Generic[T]):
    """One value that one app above registers (`filled_by` names it, for the error when it did not)."""

    def __init__(self, name: str, *, filled_by: str, required: bool = True) -> None:
        self.name = name
        self.filled_by = filled_by
        self._owner = _declaring_module()
        self._entry: _Entry[T] | None = None
        if required:
            _slots.append(self)

    def register(self, item: T) -> T:
        """Fill the slot; DuplicateRegistration when another registrant filled it already."""
        registrant = _registrant(self._owner)
        existing = self._entry
        if existing is not None and existing.item != item and existing.registrant != registrant:
            raise DuplicateRegistration(
                f"{self.name} is already registered by {existing.registrant}; {registrant} registers another one. "
                f"Only {self.filled_by} registers it."
            )
        self._entry = _Entry(item, registrant)
        return item

    def get(self) -> T:
        """The registered value; NotRegistered says which app should have registered it."""
        if self._entry is None:
            raise NotRegistered(self.missing())
        return self._entry.item

    @property
    def filled(self) -> bool:
        return self._entry is not None

    def missing(self) -> str:
        return (
            f"Nothing is registered as {self.name}: {self.filled_by} registers it from its AppConfig.ready(). "
            f"Is that app in INSTALLED_APPS?"
        )

    def __repr__(self) -> str:
        return f"<Slot {self.name}: {'filled' if self.filled else 'empty'}>"

    # For tests: empty the slot for a while.
    @contextmanager
    def restored(self) -> Iterator[Slot[T]]:
        """Whatever happens to the slot inside the block is undone when it ends."""
        saved = self._entry
        try:
            yield self
        finally:
            self._entry = saved

    def clear(self) -> None:
        self._entry = None


@checks.register("registries")
def check_slots(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The system check: every required slot declared by a loaded module is filled once the apps are ready."""
    return [
        checks.Error("Nothing is registered in this slot.", hint=slot.missing(), obj=slot.name, id="core.E001")
        for slot in _slots
        if not slot.filled
    ]


def require_slots() -> None:
    """Refuse to start (ImproperlyConfigured) while a required slot is empty; call once the apps are ready."""
    if errors := check_slots():
        raise ImproperlyConfigured(" ".join(str(error.hint) for error in errors))
