"""Plugins: code that extends a bot without changing botweave or copying its serve loop.

A plugin is a module (or a function) whose `setup(app)` registers what it brings on the App
it is given: hooks (`app.hooks.register`), commands (`app.commands.register`, listed by
/help with their arguments) and tools (`app.add_tool`). Plugins come from two places, as
Errbot's and NoneBot's do: packages installed with an entry point in the `botweave.plugins`
group (found by being installed), then the modules bot.yaml lists under `plugins:` (found by
being named). Installed ones run first, in entry-point name order; a module reached both
ways runs once. `setup` is called while the App is built, before anything starts, so nothing
a plugin registers can miss a message.

A plugin that cannot be loaded or whose setup fails stops the start with a configuration
error naming it: a bot silently missing a plugin's commands is harder to notice than one
that does not start.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

from botweave.config import ConfigError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "botweave.plugins"


def installed_plugins() -> list[EntryPoint]:
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _setup_of(target: object, where: str) -> Callable[[Any], Any]:
    """A module's `setup`, or the object itself when it is the function."""
    if isinstance(target, ModuleType):
        setup = getattr(target, "setup", None)
        if not callable(setup):
            raise ConfigError([f"{where}: module {target.__name__} has no setup(app) function"])
        return setup
    if callable(target):
        return target
    raise ConfigError([f"{where}: {target!r} is neither a module with setup(app) nor a function"])


def _import(name: str, where: str) -> object:
    module_name, _, attr = name.partition(":")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr) if attr else module
    except Exception as exc:  # boundary: a plugin's own code, run by importing it
        raise ConfigError([f"{where}: cannot import {name!r} ({type(exc).__name__}: {exc})"]) from None


def _load_entry_point(entry: EntryPoint, where: str) -> object:
    try:
        return entry.load()
    except Exception as exc:  # boundary: a plugin's own code, run by importing it
        raise ConfigError([f"{where}: cannot load {entry.value!r} ({type(exc).__name__}: {exc})"]) from None


def load_plugins(app: Any, named: Sequence[str]) -> list[str]:
    """Run the setup of every installed plugin, then of each one named; the names that ran."""
    found: list[tuple[str, Callable[[Any], Any]]] = []
    for entry in installed_plugins():
        where = f"plugin {entry.name} (entry point {entry.value})"
        found.append((where, _setup_of(_load_entry_point(entry, where), where)))
    for index, name in enumerate(named):
        where = f"plugins.{index}"
        found.append((f"{where} ({name})", _setup_of(_import(name, where), where)))
    ran: list[str] = []
    done: set[int] = set()
    for where, setup in found:
        if id(setup) in done:
            continue
        done.add(id(setup))
        try:
            result = setup(app)
        except ConfigError:
            raise
        except Exception as exc:  # boundary: a plugin's setup
            raise ConfigError([f"{where}: setup(app) failed ({type(exc).__name__}: {exc})"]) from None
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if callable(close):
                close()
            raise ConfigError([f"{where}: setup(app) must be a plain function, not async (register hooks for async work)"])
        log.info("plugin loaded: %s", where)
        ran.append(where)
    return ran
