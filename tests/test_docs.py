"""The documentation site: the configuration reference is generated from the models and
lists every field of them, every field says what it does, and the API reference covers
every public name. (`mkdocs build --strict`, which fails on a broken link or a name it cannot
find, runs in .ci/run.)"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union

import botweave
import pytest
from botweave.runtime.config import Config
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def hooks() -> Any:
    """docs/hooks.py, the generator the site is built with (importing it changes nothing)."""
    name = "botweave_docs_hooks"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DOCS / "hooks.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        yield from models_in(args[0])
    elif origin in (Union, types.UnionType, list, tuple, set, frozenset):
        for arg in args:
            yield from models_in(arg)
    elif origin is dict:
        yield from models_in(args[1])
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation


def fields(model: type[BaseModel] = Config, above: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every field a bot.yaml can set, as the chain of field names leading to it."""
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        yield (*above, name), info
        for nested in models_in(info.annotation):
            yield from fields(nested, (*above, name))


def test_every_configuration_field_says_what_it_does() -> None:
    undescribed = [".".join(path) for path, info in fields() if not (info.description or "").strip()]
    assert undescribed == [], (
        "write a docstring under each of these fields (the text a user reads in the configuration reference)"
    )


def test_the_configuration_reference_lists_exactly_the_fields_of_the_configuration() -> None:
    page = hooks().reference_markdown()
    listed = re.findall(r"^\| `([^`]+)` \|", page, re.MULTILINE)
    placeholders = {"NAME", "KEY", "PLATFORM:USER_ID"}
    chains = [tuple(p for p in key.replace("[]", "").split(".") if p not in placeholders) for key in listed]
    expected = [path for path, _ in fields()]
    assert sorted(chains) == sorted(expected)
    assert len(chains) == len(set(chains)), "a field listed twice"


def test_the_reference_shows_each_fields_type_default_and_description() -> None:
    rows = {row.key: row for row in hooks().reference_rows()}
    policy = rows["bot.unknown_user_policy"]
    assert policy.type == "`deny` \\| `pair` \\| `allow`" and policy.default == "none" and "pairing" not in policy.type
    assert rows["agents.NAME.model"].default == "required"
    assert rows["agents.NAME.max_tool_rounds"].default == "`8`" and rows["agents.NAME.max_tool_rounds"].type == "whole number"
    assert rows["agents.NAME.tools[].approval"].default == '`"none"`'
    assert rows["platforms.telegram.token"].type == "secret text"
    assert rows["push.recipients.PLATFORM:USER_ID.quiet_hours"].description.startswith("A daily window")
    assert (DOCS / "reference" / "configuration.md").read_text().count("<!-- configuration-reference -->") == 1


def test_the_api_reference_documents_every_public_name() -> None:
    page = (DOCS / "reference" / "api.md").read_text()
    documented = re.findall(r"^::: botweave\.(\w+)$", page, re.MULTILINE)
    public = [name for name in botweave.__all__ if not name.startswith("__")]
    assert sorted(documented) == sorted(public)


@pytest.mark.parametrize("name", [n for n in botweave.__all__ if not n.startswith("__")])
def test_every_public_name_has_a_docstring(name: str) -> None:
    assert (getattr(botweave, name).__doc__ or "").strip(), f"botweave.{name} needs a docstring: the API reference shows it"


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert [page for page in pages if f": {page}" not in nav] == []


def test_the_readme_bot_with_a_tool_runs_as_printed(tmp_path: Path) -> None:
    import os
    import subprocess

    readme = (ROOT / "README.md").read_text()
    tools = re.search(r"```python\n(# mytools\.py.*?)```", readme, re.DOTALL)
    bot = readme.split("<!-- bot-example -->")[1].split("<!-- /bot-example -->")[0]
    assert tools is not None
    (tmp_path / "mytools.py").write_text(tools.group(1))
    (tmp_path / "bot.py").write_text(bot.split("```python")[1].split("```")[0])
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    ran = subprocess.run(
        [sys.executable, "bot.py"], input='call weather {"city": "Lisbon"}\n', capture_output=True, text=True,
        cwd=tmp_path, env=env, timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert 'assistant (offline echo): weather returned {"city": "Lisbon", "temperature": 21, "unit": "C"}' in ran.stdout
