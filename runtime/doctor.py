"""`botweave doctor`: does this configuration work here, now?

`check` validates the file; the doctor tries it, the way a first `run` would, and stops short
of answering anyone: the configuration loads, each enabled platform accepts its credentials
(one real call each: getMe, users/@me, auth.test) and its webhook settings can work, the store
answers, the gateway (when configured) can bind its address and has usable tokens, each
agent's model answers a one-token request, and a bot already running on this
configuration's state runs what the file says (by the revision in its record in the store,
runtime/presence.py: a file edited and not reloaded, or refused by a reload, is reported).
One line per check, `ok` or `FAIL` with what to change; a platform without credentials is
`skip` (bot.yaml may list platforms not used on this host). Any FAIL makes the exit code 1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

from botweave.adapter import Check
from botweave.config import ConfigError
from botweave.gateway.checks import diagnose as diagnose_gateway
from botweave.model_clients import ClientChoice, ModelClients
from botweave.runtime.config import (
    BUILTIN_CONFIG,
    Config,
    default_store_url,
    find_config,
    load_config,
    store_settings,
)
from botweave.runtime.platforms import installed_platforms
from botweave.runtime.presence import Record, running, state_of
from botweave.store import Store, open_store, redact_url, store_failures

#: Seconds any single check may take before it counts as failed.
CHECK_TIMEOUT_S = 30.0


def line(check: Check) -> str:
    if check.skipped:
        return f"skip {check.name}: {check.detail}"
    if check.ok:
        return f"ok   {check.name}: {check.detail}"
    return f"FAIL {check.name}: {check.detail} fix: {check.fix}"


def _load(path: str | None) -> tuple[Config | None, Check]:
    found = find_config(path)
    where = str(found) if found is not None else "built-in console configuration"
    try:
        config = load_config(found if found is not None else BUILTIN_CONFIG)
    except ConfigError as exc:
        more = f" (and {len(exc.problems) - 1} more; `botweave check` lists them all)" if len(exc.problems) > 1 else ""
        return None, Check("config", False, f"{where}: {exc.problems[0]}{more}", "edit the configuration as the message says")
    if config.store.url is None:  # the store `botweave run` would use
        config.store.url = default_store_url(config)
    agents = ", ".join(config.agents)
    return config, Check("config", True, f"{where} (agents: {agents})")


async def _platforms(config: Config) -> list[Check]:
    checks: list[Check] = []
    for name, spec in installed_platforms().items():
        section = config.platform(name)
        if section is None:
            continue
        if not section.enabled:
            checks.append(Check(name, True, "disabled (enabled: false)", skipped=True))
            continue
        missing = config.missing_credentials(name)
        if missing:
            checks.append(Check(name, True, f"no credentials: {'; '.join(missing)}", skipped=True))
            continue
        try:
            checks.extend(await asyncio.wait_for(spec.create(section).diagnose(), CHECK_TIMEOUT_S))
        except asyncio.TimeoutError:
            checks.append(Check(name, False, f"no answer within {CHECK_TIMEOUT_S:.0f}s", "check the network"))
        except Exception as exc:  # boundary: a platform's diagnose; whatever its SDK raised is a failed check
            checks.append(Check(name, False, f"{type(exc).__name__}: {exc}", f"check platforms.{name}"))
    return checks


async def _store(config: Config) -> Check:
    url = config.store.url or "memory://"
    if url.startswith("memory://"):
        return Check("store", True, "memory:// (inside the bot process; state is lost when it stops)")
    store = open_store(url, config.store.prefix, base=config.base_dir)
    try:
        await asyncio.wait_for(store.connect(), CHECK_TIMEOUT_S)
        await asyncio.wait_for(store.get("doctor:probe"), CHECK_TIMEOUT_S)
    except asyncio.TimeoutError:
        return Check("store", False, f"{redact_url(url)} did not answer within {CHECK_TIMEOUT_S:.0f}s",
                     "check that the store is running and reachable from here, or fix store.url")
    except store_failures() as exc:
        return Check("store", False, str(exc) or type(exc).__name__,
                     "start the store or fix store.url (and its password)")
    finally:
        await store.close()
    return Check("store", True, f"{redact_url(url)} answers")


async def _tracing(config: Config) -> Check | None:
    """An empty OTLP export to the collector: it must answer 2xx (nothing is traced by it)."""
    tracing = config.ops.tracing
    if tracing is None:
        return None
    import aiohttp

    url = f"{tracing.endpoint}/v1/traces"
    headers = {"Content-Type": "application/x-protobuf",
               **{name: value.get_secret_value() for name, value in tracing.headers.items()}}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CHECK_TIMEOUT_S)) as session:
            async with session.post(url, data=b"", headers=headers) as response:
                status = response.status
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return Check("tracing", False, f"cannot reach the collector at {url}: {type(exc).__name__}",
                     "start the collector, or fix ops.tracing.endpoint")
    if status >= 300:
        return Check("tracing", False, f"the collector at {url} answered HTTP {status}",
                     "check ops.tracing.endpoint and ops.tracing.headers (its API key)")
    return Check("tracing", True, f"the collector at {url} accepts OTLP/HTTP exports")


async def _gateway(config: Config) -> list[Check]:
    """The gateway's bind and tokens (those in the store too, when the store is reachable)."""
    url = config.store.url or "memory://"
    if config.gateway.listen is None or url.startswith("memory://"):
        return await diagnose_gateway(config.gateway, None, installed_platforms())
    store: Store | None = open_store(url, config.store.prefix, base=config.base_dir)
    try:
        if store is not None:
            try:
                await asyncio.wait_for(store.connect(), CHECK_TIMEOUT_S)
            except store_failures(asyncio.TimeoutError):
                store = None  # the store's own line says why; bot.yaml's tokens are still checked
        return await diagnose_gateway(config.gateway, store, installed_platforms())
    finally:
        if store is not None:
            await store.close()


async def _running(config: Config | None, path: str | None) -> list[Check]:
    """Whether the bots running on this configuration's state run what the file says: one
    line per running process, none when no bot runs (or its state is out of reach, which
    the store's line says)."""
    found = find_config(path)
    try:
        settings = config.store if config is not None else store_settings(found)
    except ConfigError:
        return []
    store = state_of(settings.url or "memory://", settings.prefix, found.resolve().parent if found else None)
    if store is None:
        return []
    try:
        await asyncio.wait_for(store.connect(), CHECK_TIMEOUT_S)
        processes = await asyncio.wait_for(running(store), CHECK_TIMEOUT_S)
    except store_failures(asyncio.TimeoutError):  # the store's own check says why
        return []
    finally:
        await store.close()
    return [_compare(process, config, found) for process in processes]


def _compare(process: Record, config: Config | None, found: Path | None) -> Check:
    name = f"running bot {process.who()}"
    command = f"botweave reload {found}" if found is not None else "botweave reload"
    if config is None:
        return Check(
            name, False, f"runs revision {process.revision}; the file on disk differs from what runs: it does not load (the config line)",
            f"correct the file, then `{command}`",
        )
    if process.drift:
        return Check(name, False, process.drift, f"correct the file if a reload refused it, then `{command}`")
    if process.revision != config.revision:
        return Check(
            name, False, f"runs revision {process.revision}; the file on disk differs from what runs (it is revision {config.revision})",
            f"`{command}` (or SIGHUP to the process) applies it",
        )
    return Check(name, True, f"runs revision {process.revision}, the file's")


def _distinct_models(config: Config) -> Iterable[tuple[str, Any]]:
    """One agent per model and endpoint: two agents on one model need one request."""
    seen: set[tuple[str, str | None, str | None]] = set()
    for name, agent in config.agents.items():
        key = (agent.model, agent.api_base, agent.api_key.get_secret_value() if agent.api_key else None)
        if key not in seen:
            seen.add(key)
            yield name, agent


async def _model(name: str, agent: Any, client: ClientChoice) -> Check:
    """One tiny request, made by the client the bot would make it with (`models.client`)."""
    label = f"model {agent.model} (agent {name})"
    keys = [agent.api_key] if agent.api_key is not None else list(agent.api_keys)
    secret = keys[0].get_secret_value() if keys else None  # with api_keys: the first
    request: dict[str, Any] = {
        "model": agent.model,
        "messages": [{"role": "user", "content": "Reply with the word ok."}],
        "max_tokens": 1,
        "timeout": min(agent.timeout_seconds, CHECK_TIMEOUT_S),
        "num_retries": 0,
        "metadata": {"botweave_agent": name},
    }
    if agent.api_base:
        request["api_base"] = agent.api_base
    if secret:
        request["api_key"] = secret
    started = time.monotonic()
    calls = ModelClients(client)
    try:
        await asyncio.wait_for(calls.answer(request), CHECK_TIMEOUT_S + 5)
    except Exception as exc:  # boundary: a model provider's answer; whatever it raised is a failed check
        detail = (str(exc).splitlines() or [""])[0][:300]
        if secret:
            detail = detail.replace(secret, "***")
        return Check(label, False, f"{type(exc).__name__}: {detail}",
                     f"check agents.{name}.model and its key (the provider's API key variable, or agents.{name}.api_key / api_base)")
    finally:
        await calls.close()
    return Check(label, True, f"answered in {time.monotonic() - started:.1f}s")


async def doctor(path: str | None, *, model: bool = True, out: TextIO) -> int:
    """Run every check, print one line each to `out`; 1 when any failed, else 0."""
    failed = False

    def report(check: Check) -> None:
        nonlocal failed
        failed = failed or not (check.ok or check.skipped)
        print(line(check), file=out, flush=True)

    config, loaded = _load(path)
    report(loaded)
    if config is None:
        for check in await _running(None, path):
            report(check)
        return 1
    for check in await _platforms(config):
        report(check)
    report(await _store(config))
    traced = await _tracing(config)
    if traced is not None:
        report(traced)
    for check in await _gateway(config):
        report(check)
    for check in await _running(config, path):
        report(check)
    if not model:
        report(Check("model", True, "not checked (--no-model)", skipped=True))
    else:
        for name, agent in _distinct_models(config):
            report(await _model(name, agent, config.models.client))
    return 1 if failed else 0
