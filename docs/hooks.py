"""MkDocs hooks for botweave's documentation site (mkdocs.yml `hooks:`).

- `on_startup`: the API reference is read from the source by griffe, which finds a
  package by its folder; botweave is one import package assembled from several top-level
  folders (pyproject's `package-dir`), so the build lays that package out as symlinks under
  `.docs-build/` (mkdocs.yml points mkdocstrings there).
- `on_page_markdown`: `<!-- configuration-reference -->` in a page becomes the reference of
  every bot.yaml key, generated from the pydantic models (`botweave.runtime.config.Config`),
  so the reference cannot drift from what the loader accepts. `reference_rows()` is that
  generator; the docs tests compare its rows with the model's fields.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = ROOT / ".docs-build" / "src"
MARKER = "<!-- configuration-reference -->"

#: What a `dict[str, ...]` key stands for in a path, by the path of the mapping.
KEY_NAMES = {
    "agents": "NAME",
    "rooms": "NAME",
    "schedules": "NAME",
    "push.webhooks": "NAME",
    "push.recipients": "PLATFORM:USER_ID",
}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


# --- the configuration reference ----------------------------------------------------------


def reference_rows() -> list[Row]:
    """Every key of bot.yaml, depth first in the models' own order."""
    from botweave.runtime.config import Config

    return list(_rows(Config, ""))


def _rows(model: type[BaseModel], prefix: str) -> Iterator[Row]:
    for name, info in model.model_fields.items():
        if info.exclude:  # a room's name: its key under `rooms:`, never written as a field
            continue
        key = f"{prefix}.{name}" if prefix else name
        yield Row(key, type_name(info.annotation), default_text(info), (info.description or "").strip())
        for branch, suffix in _nested(info.annotation, key):
            yield from _rows(branch, key + suffix)


def _nested(annotation: Any, key: str) -> Iterator[tuple[type[BaseModel], str]]:
    """The models below a field, with the path step each adds (`.NAME`, `[]`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        yield from _nested(args[0], key)
    elif origin in (Union, types.UnionType):
        for arg in args:
            yield from _nested(arg, key)
    elif origin is dict:
        for model, suffix in _nested(args[1], key):
            yield model, f".{KEY_NAMES.get(key, 'KEY')}{suffix}"
    elif origin in (list, tuple, frozenset, set):
        for model, suffix in _nested(args[0], key):
            yield model, f"[]{suffix}"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, ""


def type_name(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in args)
    if origin in (Union, types.UnionType):
        named = [type_name(arg) for arg in args if arg is not type(None)]
        return " or ".join(dict.fromkeys(named))
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}"
    if origin in (list, tuple, frozenset, set):
        return f"list of {type_name(args[0])}" if args else "list"
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return "section"
        if issubclass(annotation, SecretStr):
            return "secret text"
        if issubclass(annotation, bool):
            return "true or false"
        if issubclass(annotation, int):
            return "whole number"
        if issubclass(annotation, float):
            return "number"
        if issubclass(annotation, str):
            return "text"
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def default_text(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "none"
    if isinstance(value, SecretStr):
        return "***"
    if isinstance(value, (frozenset, set, tuple)):
        value = sorted(str(getattr(v, "value", v)) for v in value)
    return "`" + json.dumps(getattr(value, "value", value), default=str, ensure_ascii=False) + "`"


def reference_markdown() -> str:
    """One table per top-level section of bot.yaml."""
    rows = reference_rows()
    sections: dict[str, list[Row]] = {}
    for row in rows:
        sections.setdefault(row.key.split(".")[0].split("[")[0], []).append(row)
    parts = []
    for section, members in sections.items():
        parts.append(f"## `{section}`\n")
        parts.append("| key | type | default | description |\n|---|---|---|---|")
        for row in members:
            description = " ".join(row.description.split()).replace("|", "\\|")
            parts.append(f"| `{row.key}` | {row.type} | {row.default} | {description} |")
        parts.append("")
    return "\n".join(parts)


# --- mkdocs hooks ---------------------------------------------------------------------------


def lay_out_package() -> Path:
    """`.docs-build/src/botweave/...` as the import system sees the package, in symlinks."""
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(LAYOUT, ignore_errors=True)
    package = LAYOUT / "botweave"
    package.mkdir(parents=True)
    for entry in (ROOT / folders["botweave"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in sorted(folders.items()):
        if name != "botweave":
            place = package.joinpath(*name.split(".")[1:])
            if not place.exists():
                place.symlink_to(ROOT / folder)
    return LAYOUT


def on_startup(command: str, dirty: bool) -> None:
    """Before any configuration event: mkdocstrings takes its search paths in its own."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    lay_out_package()


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference_markdown())
    return markdown
