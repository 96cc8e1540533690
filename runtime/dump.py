"""The effective configuration as YAML, for `botweave check`, with every secret masked."""

from __future__ import annotations

import ipaddress
from typing import Any

import yaml
from botweave.runtime.config import Config
from botweave.runtime.platforms import installed_platforms
from botweave.store import redact_url
from pydantic import BaseModel, SecretStr

MASK = "***"
_MASKED_FIELDS = frozenset({"owner_user_id"})
#: Mappings whose values are secrets (an MCP server's environment and HTTP headers).
_MASKED_MAPS = frozenset({"env", "headers"})


def _masked(value: Any, key: str = "") -> Any:
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if key in _MASKED_FIELDS and value:
        return MASK
    if key in _MASKED_MAPS and isinstance(value, dict):
        return {k: MASK for k in value}
    if isinstance(value, dict):
        return {k: _masked(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(value)  # trusted_proxies
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
    if config.network.allow_hosts or config.network.deny_hosts:
        data["network"] = _masked(config.network)
    if config.rooms:
        data["rooms"] = {name: room.model_dump(mode="json") for name, room in config.rooms.items()}
    if "push" in config.model_fields_set:
        data["push"] = _masked(config.push.model_dump(mode="json", exclude_unset=True))
    if config.schedules:
        data["schedules"] = _masked(config.schedules)
    if "gateway" in config.model_fields_set:
        data["gateway"] = _masked(config.gateway)  # tokens as ***
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
