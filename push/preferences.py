"""Per-recipient preferences: declared in bot.yaml, changed by the person with `/notify`.

Resolution order for one recipient (platform + user id): what they set with `/notify`
(kept in the store, so it survives restarts and is shared by workers) → their block under
`push.recipients` → `push.defaults` → `DEFAULT_PREFERENCE`. The bot.yaml part is resolved
by `botweave.push.config`; this module keeps what changes at run time.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from botweave.push.config import PushConfig, parse_quiet_hours
from botweave.push.policy import (
    DEFAULT_PREFERENCE,
    DetailLevel,
    NotificationCategory,
    NotificationPreference,
    format_time,
    load_zone,
    redact,
)
from botweave.store import Store

__all__ = [
    "NotifyCommandResult",
    "PreferenceStore",
    "describe_preference",
    "handle_notify_command",
]

log = logging.getLogger(__name__)


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

    @classmethod
    def from_config(cls, store: Store, config: PushConfig) -> PreferenceStore:
        """The store for a validated `push:` section: its recipients over its defaults."""
        return cls(store, config.default_preference, config.preferences)

    def configure(self, config: PushConfig) -> None:
        """Take the defaults and recipients of a reloaded `push:` section; what people chose
        with /notify stays theirs (it lives in the store)."""
        self.defaults = config.default_preference
        self.configured = dict(config.preferences)

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
