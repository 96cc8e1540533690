"""What litellm's public model information says of a model: its price per token and its
context window.

litellm keeps both in its cost map (`litellm.model_cost`, read from the JSON file it ships
when `LITELLM_LOCAL_MODEL_COST_MAP` is set, as botweave sets it). When this process imported
litellm already, its map is read; otherwise the same file is read straight from the installed
package, without importing litellm: pricing a call made by botweave's own client must not
cost the seconds and the memory of importing litellm. The file is read once, in a thread.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: The cost map litellm ships inside its package.
COST_MAP_FILE = "model_prices_and_context_window_backup.json"


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per token, prompt and completion."""

    prompt: float
    completion: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return prompt_tokens * self.prompt + completion_tokens * self.completion


@cache
def cost_map() -> dict[str, Any]:
    """litellm's model map: litellm's own when it is imported, else the file it ships."""
    litellm = sys.modules.get("litellm")
    model_cost = getattr(litellm, "model_cost", None) if litellm is not None else None
    if isinstance(model_cost, dict) and model_cost:
        return model_cost
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    for folder in spec.submodule_search_locations:
        path = Path(folder) / COST_MAP_FILE
        if path.is_file():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("litellm's model map %s is unreadable (%s); prices and context windows unknown", path, exc)
                return {}
            return loaded if isinstance(loaded, dict) else {}
    return {}


async def load_cost_map() -> dict[str, Any]:
    """The map, read in a thread the first time (the file is a few megabytes of JSON)."""
    if cost_map.cache_info().currsize:
        return cost_map()
    return await asyncio.to_thread(cost_map)


def _entry(model: str) -> dict[str, Any] | None:
    models = cost_map()
    found = models.get(model)
    if found is None and "/" in model:
        provider, _, name = model.partition("/")
        found = models.get(name)
        if isinstance(found, dict) and found.get("litellm_provider") not in (None, provider) and provider != "openai":
            found = models.get(model)
    return found if isinstance(found, dict) else None


def price_of(model: str) -> Price | None:
    """litellm's public price of `model`, or None when it lists none."""
    entry = _entry(model)
    if entry is None:
        return None
    prompt, completion = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not isinstance(prompt, (int, float)) or not isinstance(completion, (int, float)):
        return None
    return Price(float(prompt), float(completion))


def window_of(model: str) -> int | None:
    """How many tokens of input `model` reads, per litellm; None when it does not say."""
    entry = _entry(model)
    if entry is None:
        return None
    window = entry.get("max_input_tokens") or entry.get("max_tokens")
    return int(window) if isinstance(window, (int, float)) and window > 0 else None
