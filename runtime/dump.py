"""The effective configuration as YAML, for `botweave check`, with every secret masked."""

from __future__ import annotations

from typing import Any

import yaml
from botweave.runtime.config import Config
from botweave.runtime.platforms import installed_platforms
from botweave.store import redact_url
from pydantic import SecretStr

MASK = "***"
_MASKED_FIELDS = frozenset({"owner_user_id"})


def _masked(value: Any, key: str = "") -> Any:
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if key in _MASKED_FIELDS and value:
        return MASK
    if isinstance(value, dict):
        return {k: _masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def dump_config(config: Config) -> str:
    data: dict[str, Any] = {"bot": {}, "agents": {}, "platforms": {}}
    data["bot"] = _masked(dict(config.bot))
    data["agents"] = {name: _masked(dict(agent)) for name, agent in config.agents.items()}
    for name in installed_platforms():
        section = config.platform(name)
        if section is not None:
            effective = dict(section) | dict(config.bot_config_for(name))
            data["platforms"][name] = _masked(effective)
    data["routes"] = [route.model_dump(exclude_none=True) for route in config.routes]
    url = config.store.url
    data["store"] = config.store.model_dump() | {"url": redact_url(url) if url else None}
    for extra in ("rooms", "push", "schedules"):
        if getattr(config, extra):
            data[extra] = _masked(getattr(config, extra))
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
