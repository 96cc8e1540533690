"""Per-recipient preferences: declared in bot.yaml, changed by the person with `/notify`.

Resolution order for one recipient (platform + user id): what they set with `/notify`
(kept in the store, so it survives restarts and is shared by workers) → their block under
`push.recipients` → `push.defaults` → `DEFAULT_PREFERENCE`. A recipient block overrides only
the keys it names.

Config shape::

    push:
      defaults: {categories: [approval_requested, agent_question], detail: identified}
      webhooks:
        ops: {url: https://example.org/hook, secret: ${PUSH_SECRET}, retries: 3}
      recipients:
        "telegram:42":
          name: alice                 # the @handle agents use in rooms
          aliases: [al]
          quiet_hours: "22:00-07:30"  # or {start: "22:00", end: "07:30"}, or off
          timezone: Europe/Berlin
          digest: true
          webhook: ops                # deliver by webhook instead of a DM

Errors are `ConfigError`s (ValueErrors) whose lines name the path, e.g.
`push.recipients.telegram:42.quiet_hours: ...`, because the person fixing the YAML needs the
place and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import time
from typing import Any

from botweave.config import ConfigError
from botweave.push.model import DM_TRANSPORT, Recipient
from botweave.push.policy import (
    DEFAULT_PREFERENCE,
    DetailLevel,
    NotificationCategory,
    NotificationPreference,
    format_time,
    load_zone,
    redact,
)
from botweave.push.transports import DirectMessageTransport, SendDirect, Transport, WebhookTransport, safe_url
from botweave.store import Store

__all__ = [
    "NotifyCommandResult",
    "PreferenceStore",
    "PushConfig",
    "WebhookSettings",
    "describe_preference",
    "handle_notify_command",
    "parse_push_config",
    "parse_quiet_hours",
]

log = logging.getLogger(__name__)

_PREFERENCE_KEYS = ("categories", "quiet_hours", "timezone", "detail", "urgent_overrides_quiet", "digest")
_RECIPIENT_KEYS = ("name", "aliases", "webhook", *_PREFERENCE_KEYS)
_WEBHOOK_KEYS = ("url", "secret", "retries", "backoff", "timeout")
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_HANDLE = re.compile(r"^@?[A-Za-z0-9_.\-]+$")


# --------------------------------------------------------------------------- parsing helpers


def _parse_clock(value: Any) -> time:
    """`HH:MM` (24h). YAML reads an unquoted 22:00 as the number 1320, so say so."""
    if isinstance(value, time):
        return value.replace(tzinfo=None)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        raise ValueError(f'{value!r} is not a time; quote it as "HH:MM" (YAML reads unquoted 22:00 as a number)')
    match = _TIME.match(str(value).strip())
    if match is None:
        raise ValueError(f'{value!r} is not a time; write "HH:MM", e.g. "22:00"')
    hours, minutes = int(match.group(1)), int(match.group(2))
    if hours > 23 or minutes > 59:
        raise ValueError(f"{value!r} is not a time of day (00:00-23:59)")
    return time(hours, minutes)


def parse_quiet_hours(value: Any) -> tuple[time, time] | None:
    """`"22:00-07:30"`, `{start, end}`, or off (`None`, `false`, `"off"`, `"none"`) → window or None."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("off", "none", "")):
        return None
    if isinstance(value, Mapping):
        unknown = set(value) - {"start", "end"}
        if unknown or "start" not in value or "end" not in value:
            raise ValueError('expected {start: "HH:MM", end: "HH:MM"}')
        return _parse_clock(value["start"]), _parse_clock(value["end"])
    if isinstance(value, str):
        start, sep, end = value.partition("-")
        if not sep:
            raise ValueError(f'expected "HH:MM-HH:MM" (e.g. "22:00-07:30") or off, got {value!r}')
        return _parse_clock(start), _parse_clock(end)
    raise ValueError(f'expected "HH:MM-HH:MM" (e.g. "22:00-07:30") or off, got {value!r}')


def _parse_categories(value: Any) -> frozenset[NotificationCategory]:
    if value == "all":
        return frozenset(NotificationCategory)
    if value is None:
        return frozenset()
    if isinstance(value, str) or not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"expected a list of categories (or all), got {value!r}")
    return frozenset(NotificationCategory.parse(v) for v in value)


def _parse_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _parse_preference(
    raw: Any,
    path: str,
    base: NotificationPreference,
    extra_keys: tuple[str, ...],
    problems: list[str],
) -> NotificationPreference:
    """`base` with the keys of `raw` applied; every bad key becomes one line in `problems`."""
    if raw is None:
        return base
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: expected a mapping of settings, got {raw!r}")
        return base
    changes: dict[str, Any] = {}
    allowed = (*extra_keys, *_PREFERENCE_KEYS)
    for key in raw:
        if key not in allowed:
            problems.append(f"{path}.{key}: unknown setting; allowed: {', '.join(allowed)}")
    parsers: dict[str, Any] = {
        "categories": lambda v: {"categories": _parse_categories(v)},
        "quiet_hours": lambda v: dict(zip(("quiet_start", "quiet_end"), parse_quiet_hours(v) or (None, None))),
        "timezone": lambda v: {"timezone": load_zone(v).key},
        "detail": lambda v: {"detail_level": DetailLevel.parse(str(v))},
        "urgent_overrides_quiet": lambda v: {"urgent_overrides_quiet": _parse_bool(v)},
        "digest": lambda v: {"digest": _parse_bool(v)},
    }
    for key, parse in parsers.items():
        if key in raw:
            try:
                changes.update(parse(raw[key]))
            except ValueError as exc:
                problems.append(f"{path}.{key}: {exc}")
    try:
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        problems.append(f"{path}: {exc}")
        return base


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class WebhookSettings:
    """One entry of `push.webhooks`; the secret is kept out of reprs and dumps."""

    url: str
    secret: str | None = field(default=None, repr=False)
    retries: int = 3
    backoff: float = 0.5
    timeout: float = 10.0

    def __repr__(self) -> str:  # URL paths often embed tokens too, so show the host only
        return f"WebhookSettings({safe_url(self.url)}, {'signed' if self.secret else 'unsigned'})"

    def transport(self) -> WebhookTransport:
        return WebhookTransport(self.url, self.secret, self.retries, self.backoff, timeout=self.timeout)


def _parse_webhook(raw: Any, path: str, problems: list[str]) -> WebhookSettings | None:
    if isinstance(raw, str):
        raw = {"url": raw}
    if not isinstance(raw, Mapping) or "url" not in raw:
        problems.append(f"{path}: expected {{url: https://..., secret: ...}}")
        return None
    for key in raw:
        if key not in _WEBHOOK_KEYS:
            problems.append(f"{path}.{key}: unknown setting; allowed: {', '.join(_WEBHOOK_KEYS)}")
    try:
        retries = int(raw.get("retries", 3))
        backoff = float(raw.get("backoff", 0.5))
        timeout = float(raw.get("timeout", 10.0))
    except (TypeError, ValueError):
        problems.append(f"{path}: retries must be an integer, backoff and timeout numbers")
        return None
    secret = raw.get("secret")
    settings = WebhookSettings(str(raw["url"]), None if secret in (None, "") else str(secret), retries, backoff, timeout)
    try:
        settings.transport()  # validates url, retries, backoff, timeout
    except ValueError as exc:
        problems.append(f"{path}: {exc}")
        return None
    return settings


@dataclass(frozen=True)
class PushConfig:
    """The parsed `push:` block. `recipients` and `preferences` are keyed `<platform>:<user_id>`."""

    defaults: NotificationPreference = DEFAULT_PREFERENCE
    recipients: Mapping[str, Recipient] = field(default_factory=dict)
    preferences: Mapping[str, NotificationPreference] = field(default_factory=dict)
    webhooks: Mapping[str, WebhookSettings] = field(default_factory=dict)
    #: A turn running longer than this notifies the person who asked (`agent_finished`).
    agent_finished_after_seconds: float = 60.0

    def known_people(self) -> dict[str, Recipient]:
        """Handle (lower-case, no `@`) → recipient, for `mentioned_people`."""
        people: dict[str, Recipient] = {}
        for recipient in self.recipients.values():
            for handle in recipient.handles:
                people.setdefault(handle.lstrip("@").lower(), recipient)
        return people

    def preference_store(self, store: Store) -> PreferenceStore:
        return PreferenceStore(store, self.defaults, self.preferences)

    def transports(self, send_direct: SendDirect) -> dict[str, Transport]:
        """`dm` plus one `webhook:<name>` per declared webhook, ready for the `Notifier`."""
        transports: dict[str, Transport] = {DM_TRANSPORT: DirectMessageTransport(send_direct)}
        for name, settings in self.webhooks.items():
            transports[f"webhook:{name}"] = settings.transport()
        return transports


def parse_push_config(
    raw: Mapping[str, Any] | None, *, platforms: Collection[str] | None = None, path: str = "push"
) -> PushConfig:
    """Validate the `push:` block; all problems are reported at once in one `ConfigError`.
    Recipients must be on one of `platforms` when the caller knows which are installed."""
    if not raw:
        return PushConfig()
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a mapping with defaults, webhooks, recipients"])
    for key in raw:
        if key not in ("defaults", "webhooks", "recipients", "agent_finished_after_seconds"):
            problems.append(
                f"{path}.{key}: unknown setting; allowed: defaults, webhooks, recipients, agent_finished_after_seconds"
            )
    finished_after = raw.get("agent_finished_after_seconds", 60.0)
    if isinstance(finished_after, bool) or not isinstance(finished_after, (int, float)) or finished_after <= 0:
        problems.append(f"{path}.agent_finished_after_seconds: must be a number of seconds > 0 (got {finished_after!r})")
        finished_after = 60.0

    defaults = _parse_preference(raw.get("defaults"), f"{path}.defaults", DEFAULT_PREFERENCE, (), problems)

    webhooks: dict[str, WebhookSettings] = {}
    raw_hooks = raw.get("webhooks") or {}
    if not isinstance(raw_hooks, Mapping):
        problems.append(f"{path}.webhooks: expected a mapping of name → {{url, secret}}")
        raw_hooks = {}
    for name, hook in raw_hooks.items():
        settings = _parse_webhook(hook, f"{path}.webhooks.{name}", problems)
        if settings is not None:
            webhooks[str(name)] = settings

    recipients: dict[str, Recipient] = {}
    preferences: dict[str, NotificationPreference] = {}
    raw_recipients = raw.get("recipients") or {}
    if not isinstance(raw_recipients, Mapping):
        problems.append(f'{path}.recipients: expected a mapping like {{"telegram:42": {{...}}}}')
        raw_recipients = {}
    for key, block in raw_recipients.items():
        where = f"{path}.recipients.{key}"
        platform, sep, user_id = str(key).partition(":")
        if not sep or not user_id or (platforms is not None and platform not in platforms):
            problems.append(f"{where}: write recipients as <platform>:<user_id> with platform one of {', '.join(platforms or ())}")
            continue
        block = block or {}
        preferences[str(key)] = _parse_preference(block, where, defaults, ("name", "aliases", "webhook"), problems)
        if not isinstance(block, Mapping):
            continue
        transport = DM_TRANSPORT
        if block.get("webhook") is not None:
            hook = str(block["webhook"])
            if hook not in raw_hooks:
                known = ", ".join(sorted(map(str, raw_hooks))) or "none declared"
                problems.append(f"{where}.webhook: unknown webhook {hook!r}; declared under {path}.webhooks: {known}")
            transport = f"webhook:{hook}"
        name = block.get("name")
        aliases = block.get("aliases") or []
        if isinstance(aliases, str):
            aliases = [aliases]
        for handle_path, handle in ((f"{where}.name", name), *((f"{where}.aliases", a) for a in aliases)):
            if handle is not None and not _HANDLE.match(str(handle)):
                problems.append(f"{handle_path}: {handle!r} is not an @-handle (letters, digits, _ - .)")
        recipients[str(key)] = Recipient(
            platform,
            user_id,
            name=None if name is None else str(name).lstrip("@"),
            aliases=tuple(str(a).lstrip("@") for a in aliases),
            transport=transport,
        )
    if problems:
        raise ConfigError(problems)
    return PushConfig(defaults, recipients, preferences, webhooks, float(finished_after))


# --------------------------------------------------------------------------- the store


class PreferenceStore:
    """Preferences by recipient, persisted as JSON under `push:prefs:<platform>:<user_id>`."""

    PREFIX = "push:prefs:"

    def __init__(
        self,
        store: Store,
        defaults: NotificationPreference = DEFAULT_PREFERENCE,
        configured: Mapping[str, NotificationPreference] | None = None,
    ) -> None:
        self.store = store
        self.defaults = defaults
        self.configured = dict(configured or {})

    def _key(self, platform: str, user_id: str) -> str:
        return f"{self.PREFIX}{platform}:{user_id}"

    def configured_for(self, platform: str, user_id: str) -> NotificationPreference:
        """What bot.yaml says for this person, before any `/notify` change."""
        return self.configured.get(f"{platform}:{user_id}", self.defaults)

    async def get(self, platform: str, user_id: str) -> NotificationPreference:
        raw = await self.store.get(self._key(platform, user_id))
        if raw is not None:
            try:
                return NotificationPreference.from_dict(json.loads(raw))
            except (ValueError, TypeError, KeyError) as exc:
                # A stored value we cannot read (hand-edited, or a zone dropped by tzdata) must
                # not stop notifications; the configured preference is the safe fallback.
                log.warning("push: ignoring unreadable stored preference for %s:%s (%s)", platform, user_id, exc)
        return self.configured_for(platform, user_id)

    async def set(self, platform: str, user_id: str, preference: NotificationPreference) -> None:
        await self.store.set(self._key(platform, user_id), json.dumps(preference.to_dict()))

    async def reset(self, platform: str, user_id: str) -> None:
        """Forget `/notify` changes; the configured preference applies again."""
        await self.store.delete(self._key(platform, user_id))

    async def apply_command(self, platform: str, user_id: str, args: str) -> NotifyCommandResult:
        """Run `/notify <args>` for this person and persist a change. The caller checks that the
        message is an `allow_control` DM first: preferences are personal."""
        result = handle_notify_command(args, await self.get(platform, user_id))
        if result.changed:
            await self.set(platform, user_id, result.preference)
        return result


# --------------------------------------------------------------------------- /notify


USAGE = (
    "Usage:\n"
    "/notify — show your settings\n"
    "/notify on|off <category|all>\n"
    "/notify quiet 22:00-07:30 [Europe/Berlin] — or /notify quiet off\n"
    "/notify detail private|identified|detailed\n"
    "/notify digest on|off — one summary after quiet hours\n"
    "/notify urgent on|off — let urgent events through quiet hours\n"
    "Categories: " + ", ".join(c.value for c in NotificationCategory)
)


@dataclass(frozen=True)
class NotifyCommandResult:
    """The reply for the person and the preference after the command (unchanged on errors)."""

    reply: str
    preference: NotificationPreference
    changed: bool = False


def describe_preference(pref: NotificationPreference) -> str:
    """The readable settings `/notify` shows."""
    on = [c.value for c in NotificationCategory if c in pref.categories]
    off = [c.value for c in NotificationCategory if c not in pref.categories]
    if pref.has_quiet_hours:
        assert pref.quiet_start is not None and pref.quiet_end is not None
        quiet = f"{format_time(pref.quiet_start)}-{format_time(pref.quiet_end)} {pref.timezone}"
        quiet += " (urgent events still come through)" if pref.urgent_overrides_quiet else " (nothing comes through)"
    else:
        quiet = "none"
    example = redact(pref.detail_level, "the message itself", "<room>")
    lines = [
        "Your notifications:",
        f"• on: {', '.join(on) or 'nothing'}",
        f"• off: {', '.join(off) or 'nothing'}",
        f"• quiet hours: {quiet}",
        f"• detail: {pref.detail_level.value} (you see: “{example}”)",
        f"• digest after quiet hours: {'on' if pref.digest else 'off'}",
        "Change with /notify help.",
    ]
    return "\n".join(lines)


def _on_off(word: str) -> bool | None:
    return {"on": True, "off": False}.get(word.lower())


def handle_notify_command(args: str, current: NotificationPreference) -> NotifyCommandResult:
    """Pure: parse `/notify` arguments and apply them to `current`.

    Mistakes get a reply that says what is accepted and leave the preference unchanged.
    """
    words = args.split()
    if not words or words[0].lower() in ("show", "status", "settings"):
        return NotifyCommandResult(describe_preference(current), current)
    verb, rest = words[0].lower(), words[1:]

    def changed(pref: NotificationPreference, what: str) -> NotifyCommandResult:
        return NotifyCommandResult(f"{what}\n\n{describe_preference(pref)}", pref, pref != current)

    if verb in ("on", "off") and len(rest) == 1:
        if rest[0].lower() == "all":
            chosen = frozenset(NotificationCategory)
        else:
            try:
                chosen = frozenset({NotificationCategory.parse(rest[0])})
            except ValueError as exc:
                return NotifyCommandResult(str(exc), current)
        categories = current.categories | chosen if verb == "on" else current.categories - chosen
        names = "all categories" if len(chosen) > 1 else next(iter(chosen)).value
        return changed(dataclasses.replace(current, categories=categories), f"Notifications for {names}: {verb}.")

    if verb == "quiet" and rest:
        if len(rest) == 1 and rest[0].lower() in ("off", "none"):
            return changed(dataclasses.replace(current, quiet_start=None, quiet_end=None), "Quiet hours: off.")
        # Accept "22:00-07:30 Zone" and "22:00 - 07:30 Zone": a zone name has a slash
        # ("Europe/Berlin", "Etc/GMT+5") or no digits ("UTC", "Japan"); a time has digits.
        has_zone = len(rest) >= 2 and ("/" in rest[-1] or not any(ch.isdigit() for ch in rest[-1]))
        spec, zone = (rest[:-1], rest[-1]) if has_zone else (rest, None)
        try:
            window = parse_quiet_hours("".join(spec))
            timezone = current.timezone if zone is None else load_zone(zone).key
        except ValueError as exc:
            return NotifyCommandResult(f"{exc}\nExample: /notify quiet 22:00-07:30 Europe/Berlin", current)
        if window is None:
            return changed(dataclasses.replace(current, quiet_start=None, quiet_end=None), "Quiet hours: off.")
        start, end = window
        note = " (start equals end, so there are no quiet hours)" if start == end else ""
        pref = dataclasses.replace(current, quiet_start=start, quiet_end=end, timezone=timezone)
        return changed(pref, f"Quiet hours: {format_time(start)}-{format_time(end)} {timezone}{note}.")

    if verb == "detail" and len(rest) == 1:
        try:
            level = DetailLevel.parse(rest[0])
        except ValueError as exc:
            return NotifyCommandResult(str(exc), current)
        return changed(dataclasses.replace(current, detail_level=level), f"Detail level: {level.value}.")

    if verb in ("digest", "urgent") and len(rest) == 1 and _on_off(rest[0]) is not None:
        value = _on_off(rest[0])
        if verb == "digest":
            return changed(dataclasses.replace(current, digest=bool(value)), f"Digest: {rest[0].lower()}.")
        pref = dataclasses.replace(current, urgent_overrides_quiet=bool(value))
        return changed(pref, f"Urgent events during quiet hours: {'come through' if value else 'wait'}.")

    return NotifyCommandResult(USAGE, current)
