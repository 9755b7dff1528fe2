"""Every project setting declared in core.conf is read by config.settings from its environment variable, with its
declared type and default, and is described in .env.example."""

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import environ
import pytest

from core.conf import DEFAULTS, SETTINGS, setting

ROOT = Path(__file__).resolve().parents[2]
FROM_ENVIRONMENT = [declared for declared in SETTINGS if declared.kind is not None]
PYTHON_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "list": list}


def _load_config_settings(monkeypatch: pytest.MonkeyPatch, environment: dict[str, str]) -> ModuleType:
    """A fresh run of config/settings.py with the declared settings' variables exactly `environment` (a developer's
    .env is not read)."""
    monkeypatch.setattr(environ.Env, "read_env", classmethod(lambda cls, *args, **kwargs: None))
    monkeypatch.setenv("DJANGO_SECRET_KEY", "x" * 60)
    for declared in SETTINGS:
        monkeypatch.delenv(declared.name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.find_spec("config.settings")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_setting_is_declared_once_with_a_default_of_its_type():
    names = [declared.name for declared in SETTINGS]
    assert len(names) == len(set(names))
    assert list(DEFAULTS) == names
    for declared in FROM_ENVIRONMENT:
        assert type(declared.default) is PYTHON_TYPES[declared.kind], declared.name
        assert declared.doc.strip(), declared.name


def test_with_an_empty_environment_config_settings_has_every_declared_default(monkeypatch):
    loaded = _load_config_settings(monkeypatch, {})
    for declared in FROM_ENVIRONMENT:
        value = getattr(loaded, declared.name)
        assert value == declared.default, declared.name
        assert type(value) is type(declared.default), declared.name
    # The rest are set in a settings module or not at all; setting() then gives the declared default.
    for declared in SETTINGS:
        if declared.kind is None:
            assert not hasattr(loaded, declared.name), declared.name
            assert setting(declared.name) == declared.default


def _environment_value(kind: str, default: object) -> tuple[str, object]:
    """A value of the environment other than the default, and what it must be read as."""
    return {
        "str": ("from-the-environment", "from-the-environment"),
        "int": ("7", 7),
        "float": ("2.5", 2.5),
        "bool": ("0", False) if default else ("1", True),
        "list": ("a,b", ["a", "b"]),
    }[kind]


def test_a_value_in_the_environment_is_read_with_the_declared_type(monkeypatch):
    cases = {declared.name: _environment_value(declared.kind, declared.default) for declared in FROM_ENVIRONMENT}
    loaded = _load_config_settings(monkeypatch, {name: raw for name, (raw, _) in cases.items()})
    for name, (_, expected) in cases.items():
        value = getattr(loaded, name)
        assert value == expected, name
        assert type(value) is type(expected), name
    assert loaded.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["api_key"] == "from-the-environment"


def test_env_example_describes_every_setting_read_from_the_environment():
    listed = set(re.findall(r"^# ([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.MULTILINE))
    missing = [declared.name for declared in FROM_ENVIRONMENT if declared.name not in listed]
    assert missing == []
