"""core.registry: a taken key or a filled slot is refused naming both registrants, a lookup that finds nothing says
what is registered, and a required slot left empty fails `manage.py check` and start-up."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from core.registry import DuplicateRegistration, NotRegistered, check_slots, require_slots
from memory import links
from plans import tasks
from tests.core import declared


def _first() -> str:
    return "first"


def _second() -> str:
    return "second"


def test_a_key_taken_by_another_registrant_is_refused_naming_both():
    things = declared.things()
    things.register("menu", _first)
    with pytest.raises(DuplicateRegistration) as refused:
        things.register("menu", _second)
    message = str(refused.value)
    assert "'menu' is already registered in the test things" in message
    first_line = _line_of('things.register("menu", _first)')
    second_line = _line_of('things.register("menu", _second)')
    assert f"by tests.core.test_registry line {first_line};" in message
    assert f"tests.core.test_registry line {second_line} registers another one" in message
    assert things.get("menu") is _first


def test_the_registrant_is_the_caller_of_the_modules_register_function():
    things = declared.things()
    declared.register_through_a_wrapper(things, "menu", _first)
    with pytest.raises(DuplicateRegistration, match=r"by tests\.core\.test_registry line \d+"):
        declared.register_through_a_wrapper(things, "menu", _second)


def test_registering_the_same_item_again_or_from_the_same_line_is_harmless():
    things = declared.things()
    things.register("menu", _first)
    things.register("menu", _first)
    for item in (_first, _second):  # a reloaded module registers again from the same line
        things.register("dish", item)
    assert things.items() == [("menu", _first), ("dish", _second)]


def test_a_missing_key_names_the_registry_and_what_it_holds():
    things = declared.things()
    things.register("menu", _first)
    things.register("order", _second)
    with pytest.raises(NotRegistered) as missing:
        things.get("bill")
    assert str(missing.value) == "No 'bill' in the test things (tests.core.declared) (registered: 'menu', 'order')."
    assert isinstance(missing.value, KeyError) and things.find("bill") is None


def test_iteration_follows_registration_or_the_order_key():
    things = declared.things()
    by_length = declared.things(order=len)
    for word in ("ccc", "a", "bb"):
        things.register(word, word)
        by_length.register(word, word)
    assert list(things) == ["ccc", "a", "bb"] and by_length.keys() == ["a", "bb", "ccc"]
    assert "a" in things and "d" not in things and len(things) == 3


def test_restored_undoes_what_the_block_changed():
    things = declared.things()
    things.register("menu", _first)
    with things.restored():
        things.unregister("menu")
        things.register("menu", _second)
        assert things.get("menu") is _second
    assert things.get("menu") is _first


def test_an_empty_slot_fails_loudly_naming_the_app_that_registers_it():
    slot = declared.slot()
    assert not slot.filled
    with pytest.raises(NotRegistered) as missing:
        slot.get()
    assert str(missing.value) == (
        "Nothing is registered as the test slot (tests.core.declared): the test app (tests.core) registers it from "
        "its AppConfig.ready(). Is that app in INSTALLED_APPS?"
    )


def test_a_slot_filled_by_another_registrant_is_refused():
    slot = declared.slot()
    slot.register(_first)
    with pytest.raises(DuplicateRegistration, match=r"the test slot .* is already registered by tests\.core\.test_reg"):
        slot.register(_second)
    slot.register(_first)
    assert slot.get() is _first


def test_the_platforms_slots_are_filled_once_the_apps_are_ready():
    assert check_slots() == []
    require_slots()
    assert links.conversation_page_registered() and tasks._server_turn.filled


@pytest.mark.parametrize(
    ("slot", "app"),
    [(tasks._server_turn, "the engine app (engine.apps.EngineConfig)"), (links._page, "the chat app")],
)
def test_the_system_check_reports_an_empty_slot(slot, app):
    with slot.restored():
        slot.clear()
        (error,) = check_slots()
        assert error.id == "core.E001" and app in error.hint and error.obj == slot.name
        with pytest.raises(SystemCheckError) as check:
            call_command("check")
        assert f"{slot.name}: (core.E001) Nothing is registered in this slot." in str(check.value)
        with pytest.raises(ImproperlyConfigured) as start:
            require_slots()
        assert str(start.value) == slot.missing() and app in str(start.value)
    assert check_slots() == []
    call_command("check")


def _line_of(code: str) -> int:
    with open(__file__, encoding="utf-8") as source:
        return next(number for number, line in enumerate(source, 1) if line.strip() == code)
