"""What the adapter and slack-bolt read of a Slack request, as schemas applied before either does.

Bolt reads a request body in many places before any listener runs (`enterprise`, `team`,
`authorizations[0]`, `user`, `channel`, `event.type`, ...), each assuming Slack's types, and the
normaliser reads the event after it. `sanitise_body` applies these schemas first (see
`botweave.payload`): a wrong-typed field is absent, strings are safe for the model call, and
a body that is not an object with a string `type` (or a slash command) is not usable at all.
"""

from __future__ import annotations

import re
from typing import Any

from botweave.payload import (
    BOOL,
    INT,
    INVALID,
    MIME,
    STR,
    Dropped,
    ListOf,
    Scalar,
    Schema,
    Spec,
    clean_text,
    sanitise,
)

_TS = re.compile(r"\d{1,12}(?:\.\d{1,9})?")


def _slack_ts(value: Any) -> Any:
    """Slack's message timestamps (`1700000000.000100`): a string of digits, not a number."""
    return value if isinstance(value, str) and _TS.fullmatch(value) else INVALID


TS = Scalar("slack ts", _slack_ts)


class Either(Spec):
    """The first of several shapes that fits (Slack sends `team` as an id or as an object)."""

    def __init__(self, *options: Spec) -> None:
        self.options = options

    def check(self, value: Any, depth: int, dropped: Dropped | None = None, path: str = "") -> Any:
        for option in self.options:
            checked = option.check(value, depth, None, path)
            if checked is not INVALID:
                return checked
        return INVALID


_ID_OBJECT = Schema("object with id").define({"id": STR, "name": STR, "domain": STR, "enterprise_id": STR})
ID_OR_OBJECT = Either(STR, _ID_OBJECT)
USER_REF = Either(
    STR, Schema("user").define({"id": STR, "team_id": STR, "name": STR, "username": STR}, required=("id",))
)
AUTHORIZATION = Schema("authorization").define(
    {"enterprise_id": STR, "team_id": STR, "user_id": STR, "is_bot": BOOL, "is_enterprise_install": BOOL}
)
FILE = Schema("file").define(
    {"id": STR, "name": STR, "mimetype": MIME, "url_private": STR, "url_private_download": STR, "size": INT}
)
BOT_PROFILE = Schema("bot_profile").define({"name": STR, "id": STR})
MESSAGE = Schema("message").define(
    {
        "type": STR, "subtype": STR, "ts": TS, "thread_ts": TS, "text": STR, "user": STR, "bot_id": STR,
        "username": STR, "reply_users": ListOf(STR), "files": ListOf(FILE), "bot_profile": BOT_PROFILE,
        "parent_user_id": STR, "team": STR,
    }
)
ITEM = Schema("item").define({"type": STR, "channel": STR, "ts": TS, "file": STR})
EVENT = Schema("event").define(
    {
        "type": STR, "subtype": STR, "channel": ID_OR_OBJECT, "channel_type": STR, "user": STR, "bot_id": STR,
        "username": STR, "bot_profile": BOT_PROFILE, "text": STR, "ts": TS, "thread_ts": TS, "event_ts": TS,
        "team": STR, "user_team": STR, "parent_user_id": STR, "files": ListOf(FILE), "root": MESSAGE,
        "message": MESSAGE, "previous_message": MESSAGE, "deleted_ts": TS, "hidden": BOOL, "item": ITEM,
        "reaction": STR, "item_user": STR, "inviter": STR, "function_execution_id": STR,
        "bot_access_token": STR,
    },
    required=("type",),
)
ACTION = Schema("action").define(
    {"type": STR, "action_id": STR, "block_id": STR, "value": STR, "action_ts": STR}
)
def _bolt_can_read(body: dict[str, Any]) -> bool:
    """What bolt reads without asking: a workflow step's edit or save carries the step."""
    kind, view = body.get("type"), body.get("view") or {}
    if kind == "workflow_step_edit" or (kind == "view_submission" and view.get("type") == "workflow_step"):
        return "workflow_step" in body
    return True


#: An Events API envelope, an interactive payload, or a slash command's form fields.
BODY = Schema("request body").define(
    {
        "type": STR, "token": STR, "team_id": STR, "api_app_id": STR, "enterprise_id": STR, "event_id": STR,
        "event_time": INT, "challenge": STR, "context_team_id": STR, "context_enterprise_id": STR,
        "is_ext_shared_channel": BOOL, "is_enterprise_install": BOOL, "authorizations": ListOf(AUTHORIZATION),
        "enterprise": ID_OR_OBJECT, "team": ID_OR_OBJECT, "user": USER_REF, "channel": ID_OR_OBJECT,
        "event": EVENT, "message": MESSAGE, "previous_message": MESSAGE, "item": ITEM,
        "view": Schema("view").define({"id": STR, "type": STR, "callback_id": STR, "team_id": STR,
                                       "app_installed_team_id": STR}),
        "workflow_step": Schema("workflow step").define({"workflow_step_edit_id": STR}),
        "container": Schema("container").define({"type": STR, "message_ts": TS, "channel_id": STR, "thread_ts": TS}),
        "actions": ListOf(ACTION, min_items=1), "trigger_id": STR, "response_url": STR,
        "response_urls": ListOf(Schema("response url").define({"response_url": STR})),
        "function_data": Schema("function data").define({"execution_id": STR}),
        "assistant_thread": Schema("assistant thread").define({"channel_id": STR, "thread_ts": TS}),
        "command": STR, "text": STR, "user_id": STR, "user_name": STR, "channel_id": STR, "channel_name": STR,
        "team_domain": STR, "command_ts": STR, "function_execution_id": STR, "bot_access_token": STR,
        "thread_ts": TS, "ssl_check": STR,
    },
    rule=lambda body: ("type" in body or "command" in body or "ssl_check" in body) and _bolt_can_read(body),
)


def sanitise_body(body: Any, dropped: Dropped | None = None) -> dict[str, Any] | None:
    """A request body as `BODY` describes it; None when there is nothing usable in it (not an
    object, or neither an event envelope, an interaction nor a slash command)."""
    cleaned = sanitise(body, BODY, dropped)
    return cleaned if isinstance(cleaned, dict) else None


def sanitise_event(event: Any, dropped: Dropped | None = None) -> dict[str, Any] | None:
    """One event as `EVENT` describes it; None when it is not an object with a string `type`."""
    cleaned = sanitise(event, EVENT, dropped)
    return cleaned if isinstance(cleaned, dict) else None


def form_fields(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """A form body's fields (the first of repeated names), cleaned like every other string."""
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(clean_text(name), clean_text(value))
    return fields
