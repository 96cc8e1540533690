"""The `push:` section of bot.yaml: default preferences, webhooks and recipients.

Shape::

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

A recipient's preference is `push.defaults` with the keys of their own block on top, and
`push.defaults` is the built-in default preference with its keys on top: a block overrides
only what it names. Each problem is reported at its path, all in one run, e.g.
`push.recipients.telegram:42.quiet_hours: ...`.

Which platforms a recipient may be on is the runtime's knowledge, not this package's (a
feature does not import the runtime). The composed configuration hands the installed
platform names in as the validation context's `platforms`, so a recipient on an unknown
platform is reported with everything else; validated without that context (a push block
checked on its own), any platform name is accepted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Iterator, Mapping
from datetime import time
from typing import Annotated, Any, Optional

from botweave.config import ConfigError, Section, format_errors, problem, raise_problems
from botweave.push.model import DM_TRANSPORT, Recipient
from botweave.push.policy import (
    DEFAULT_PREFERENCE,
    Category,
    Detail,
    NotificationCategory,
    NotificationPreference,
    ZoneName,
    format_time,
)
from botweave.push.transports import (
    DirectMessageTransport,
    SendDirect,
    Transport,
    WebhookTransport,
    check_webhook_url,
    safe_url,
)
from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    SecretStr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

__all__ = [
    "PreferenceConfig",
    "PushConfig",
    "RecipientConfig",
    "WebhookSettings",
    "parse_push_config",
    "parse_quiet_hours",
]

_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_HANDLE = re.compile(r"^@?[A-Za-z0-9_.\-]+$")


# --------------------------------------------------------------------------- value types


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
    """`"22:00-07:30"`, `{start, end}`, or off (`None`, `false`, `"off"`, `"none"`) → window or None.
    bot.yaml and `/notify quiet` both read quiet hours through this."""
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


def _category_list(value: Any) -> Any:
    """`all`, a list, or null (nothing); a lone name is answered with the list form."""
    if value == "all":
        return frozenset(NotificationCategory)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        raise ValueError(f"expected a list of categories (or all), e.g. categories: [{value}]")
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"expected a list of categories (or all), got {value!r}")
    return value


def _handle(value: str) -> str:
    if not _HANDLE.match(value):
        raise ValueError(f"{value!r} is not an @-handle (letters, digits, _ - .)")
    return value.lstrip("@")


def _one_or_many(value: Any) -> Any:
    if value is None:
        return ()
    return [value] if isinstance(value, str) else value


def _recipient_key(key: str, info: ValidationInfo) -> str:
    platform, sep, user_id = key.partition(":")
    platforms: Collection[str] | None = (info.context or {}).get("platforms")
    if not sep or not platform or not user_id or (platforms is not None and platform not in platforms):
        known = f" with platform one of {', '.join(sorted(platforms))}" if platforms is not None else ""
        raise ValueError(
            f"write recipients as <platform>:<user_id>{known}, e.g. \"telegram:123456\" (got {key!r})"
        )
    return key


def _seconds(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number of seconds (got {value!r})")
    return value


def _none_is_empty(value: Any) -> Any:
    """A key with everything under it commented out reads as null: treat it as empty."""
    return {} if value is None else value


QuietHours = Annotated[Optional[tuple[time, time]], BeforeValidator(parse_quiet_hours)]
Categories = Annotated[frozenset[Category], BeforeValidator(_category_list)]
Handle = Annotated[str, AfterValidator(_handle)]
RecipientKey = Annotated[str, AfterValidator(_recipient_key)]


# --------------------------------------------------------------------------- sections


class PreferenceConfig(Section):
    """Preference keys as bot.yaml writes them (`push.defaults`, and each recipient's block).

    Only the keys actually written apply (`over`): a field's default here means nothing, so
    `quiet_hours: off` can switch off a window set in `push.defaults` while a block without
    `quiet_hours` keeps it.
    """

    categories: Categories = frozenset()
    """What the person is told about: `approval_requested`, `agent_finished`, `agent_question`,
    `human_mentioned`, `scheduled_task_failed`, `background_task_failed`, or `all`."""
    quiet_hours: QuietHours = None
    """A daily window with no notifications, `"22:00-07:30"` (quoted) or `{start, end}`, or
    `off`."""
    timezone: ZoneName = "UTC"
    """The time zone quiet hours are read in."""
    detail: Detail = DEFAULT_PREFERENCE.detail_level
    """How much a notification shows: `private` ("You have new activity"), `identified` (who it
    is from), `detailed` (the content itself)."""
    urgent_overrides_quiet: StrictBool = True
    """Urgent notifications (approval requests) are sent during quiet hours too."""
    digest: StrictBool = False
    """Notifications held back by quiet hours are sent as one digest when the quiet hours end."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_empty(cls, data: Any) -> Any:
        return _none_is_empty(data)

    def over(self, base: NotificationPreference) -> NotificationPreference:
        """`base` with the keys this block names."""
        given = self.model_fields_set
        changes: dict[str, Any] = {}
        if "categories" in given:
            changes["categories"] = self.categories
        if "quiet_hours" in given:
            changes["quiet_start"], changes["quiet_end"] = self.quiet_hours or (None, None)
        if "timezone" in given:
            changes["timezone"] = self.timezone
        if "detail" in given:
            changes["detail_level"] = self.detail
        for name in ("urgent_overrides_quiet", "digest"):
            if name in given:
                changes[name] = getattr(self, name)
        return dataclasses.replace(base, **changes)

    @field_serializer("categories")
    def _sorted(self, categories: frozenset[NotificationCategory]) -> list[str]:
        return sorted(c.value for c in categories)

    @field_serializer("quiet_hours")
    def _window(self, window: tuple[time, time] | None) -> str:
        return "off" if window is None else f"{format_time(window[0])}-{format_time(window[1])}"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """Only the keys written: the others are not settings of this block but inherited."""
        for name in type(self).model_fields:
            if name in self.model_fields_set:
                yield name, getattr(self, name)


class RecipientConfig(PreferenceConfig):
    """One person under `push.recipients`: how agents name them, how to reach them, and the
    preference keys that differ from `push.defaults`."""

    name: Optional[Handle] = None
    """The @-handle agents use for this person in rooms (`@alice`)."""
    aliases: Annotated[tuple[Handle, ...], BeforeValidator(_one_or_many)] = ()
    """Other handles that mean this person."""
    webhook: Optional[str] = None
    """Deliver this person's notifications to this entry of `push.webhooks` instead of a direct
    message."""

    def recipient(self, key: str) -> Recipient:
        """The Recipient this block describes, for its `<platform>:<user_id>` key."""
        transport = DM_TRANSPORT if self.webhook is None else f"webhook:{self.webhook}"
        return Recipient.parse(key, name=self.name, aliases=self.aliases, transport=transport)


class WebhookSettings(Section):
    """One entry of `push.webhooks`: a URL alone, or a mapping with a signing secret and
    retry settings. The secret and the URL's path (webhook paths often carry tokens) stay out
    of reprs, logs and dumps."""

    url: str
    """The HTTP(S) endpoint notifications are posted to as JSON."""
    secret: Optional[SecretStr] = None
    """Signs each post (HMAC-SHA256 in a header) so the receiver can check it came from the bot."""
    retries: Annotated[int, Field(ge=0)] = 3
    """Further attempts after a failed post."""
    backoff: Annotated[float, Field(ge=0)] = 0.5
    """Seconds before the first retry, doubled for each next one."""
    timeout: Annotated[float, Field(gt=0)] = 10.0
    """Seconds one post may take."""

    @model_validator(mode="before")
    @classmethod
    def _url_alone(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else data

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        try:
            check_webhook_url(url)
        except ValueError:
            raise ValueError(f"must be an http(s)://host/... URL (got {safe_url(url)!r})") from None
        return url

    @field_validator("secret", mode="before")
    @classmethod
    def _empty_is_unsigned(cls, secret: Any) -> Any:
        return None if secret == "" else secret  # `secret: ${PUSH_SECRET}` with the variable unset

    @field_serializer("url")
    def _host_only(self, url: str) -> str:
        return safe_url(url) + "/***"

    @field_serializer("secret", when_used="json")
    def _masked(self, secret: SecretStr | None) -> str | None:
        return None if secret is None else "***"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        yield "url", safe_url(self.url)
        yield "signed", self.secret is not None
        yield "retries", self.retries

    def transport(self) -> WebhookTransport:
        secret = None if self.secret is None else self.secret.get_secret_value()
        return WebhookTransport(self.url, secret, self.retries, self.backoff, timeout=self.timeout)


class PushConfig(Section):
    """The `push:` section. The fields are what bot.yaml says; `default_preference`,
    `preferences` and `directory` are what it means, resolved once at validation."""

    defaults: PreferenceConfig = Field(default_factory=PreferenceConfig)
    """The preferences of every recipient, under each person's own keys."""
    webhooks: Annotated[dict[str, WebhookSettings], BeforeValidator(_none_is_empty)] = Field(default_factory=dict)
    """Named webhook endpoints recipients may be reached through (a URL, or a mapping with a
    secret and retries)."""
    recipients: Annotated[dict[RecipientKey, RecipientConfig], BeforeValidator(_none_is_empty)] = Field(
        default_factory=dict
    )
    """People who get notifications, by `<platform>:<user_id>`, with their handle and their own
    preferences."""
    agent_finished_after_seconds: Annotated[float, BeforeValidator(_seconds), Field(gt=0)] = 60.0
    """A turn running longer than this notifies the person who asked (`agent_finished`)."""

    _default_preference: NotificationPreference = PrivateAttr(default=DEFAULT_PREFERENCE)
    _preferences: dict[str, NotificationPreference] = PrivateAttr(default_factory=dict)
    _directory: dict[str, Recipient] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _null_is_empty(cls, data: Any) -> Any:
        return _none_is_empty(data)

    @model_validator(mode="after")
    def _resolve(self) -> PushConfig:
        declared = ", ".join(sorted(self.webhooks)) or "none declared"
        raise_problems(
            type(self).__name__,
            [
                problem(
                    ("recipients", key, "webhook"),
                    f"unknown webhook {block.webhook!r}; declared under push.webhooks: {declared}",
                    block.webhook,
                )
                for key, block in self.recipients.items()
                if block.webhook is not None and block.webhook not in self.webhooks
            ],
        )
        self._default_preference = self.defaults.over(DEFAULT_PREFERENCE)
        self._preferences = {key: block.over(self._default_preference) for key, block in self.recipients.items()}
        self._directory = {key: block.recipient(key) for key, block in self.recipients.items()}
        return self

    @property
    def default_preference(self) -> NotificationPreference:
        """What anyone not listed under `recipients` gets: `push.defaults` over the built-in one."""
        return self._default_preference

    @property
    def preferences(self) -> Mapping[str, NotificationPreference]:
        """Each listed recipient's preference as configured, keyed `<platform>:<user_id>`."""
        return self._preferences

    @property
    def directory(self) -> Mapping[str, Recipient]:
        """Each listed recipient, keyed `<platform>:<user_id>`."""
        return self._directory

    def known_people(self) -> dict[str, Recipient]:
        """Handle (lower-case, no `@`) → recipient, for `mentioned_people`."""
        people: dict[str, Recipient] = {}
        for recipient in self._directory.values():
            for handle in recipient.handles:
                people.setdefault(handle.lstrip("@").lower(), recipient)
        return people

    def transports(self, send_direct: SendDirect) -> dict[str, Transport]:
        """`dm` plus one `webhook:<name>` per declared webhook, ready for the `Notifier`."""
        transports: dict[str, Transport] = {DM_TRANSPORT: DirectMessageTransport(send_direct)}
        for name, settings in self.webhooks.items():
            transports[f"webhook:{name}"] = settings.transport()
        return transports


def parse_push_config(
    raw: Mapping[str, Any] | None, *, platforms: Collection[str] | None = None, path: str = "push"
) -> PushConfig:
    """Validate a `push:` block on its own (bot.yaml's is validated with the rest of the
    configuration); every problem is one line of one ConfigError. Recipients must be on one
    of `platforms` when given."""
    try:
        return PushConfig.model_validate(raw, context=None if platforms is None else {"platforms": platforms})
    except ValidationError as exc:
        raise ConfigError(format_errors(exc, PushConfig, prefix=path)) from None
