"""The gateway fields discord.py and the adapter read, as schemas applied before discord.py parses.

discord.py stores many fields as it finds them (`content`, `author.username`, attachment
names) and indexes others without asking (`data['content']`), so a wrong type surfaces as
an exception in its parser or later in the normaliser. Each dispatch the adapter handles is
sanitised first (see `botweave.payload`): a wrong-typed field is absent, and where
discord.py cannot do without a field, absent means its empty value (`content` "", lists
[]); a message without a usable id, channel or author is skipped with one line.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botweave.payload import (
    BOOL,
    INT,
    INVALID,
    MIME,
    NUMBER,
    NUMERIC_ID,
    STR,
    Default,
    ListOf,
    Nullable,
    Scalar,
    Schema,
    Spec,
)


def _iso_time(value: Any) -> Any:
    """An ISO 8601 timestamp discord.py can parse."""
    if not isinstance(value, str) or len(value) > 40:
        return INVALID
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return INVALID
    return value


ISO_TIME = Scalar("ISO time", _iso_time)
SNOWFLAKES = Default(ListOf(NUMERIC_ID), list)

USER = Schema("user").define(
    {
        "id": NUMERIC_ID, "username": STR, "discriminator": Default(STR, "0"), "global_name": Nullable(STR),
        "avatar": Default(Nullable(STR), None), "bot": BOOL, "system": BOOL, "public_flags": INT,
        "banner": Nullable(STR), "accent_color": Nullable(INT),
    },
    required=("id", "username"),
)
MEMBER = Schema("member").define(
    {
        "nick": Nullable(STR), "avatar": Nullable(STR), "roles": SNOWFLAKES, "joined_at": Nullable(ISO_TIME),
        "premium_since": Nullable(ISO_TIME), "communication_disabled_until": Nullable(ISO_TIME),
        "pending": BOOL, "flags": INT, "deaf": BOOL, "mute": BOOL, "user": USER,
    }
)
MENTION = Schema("mentioned user").define({**USER.fields, "member": MEMBER}, required=USER.required)
ATTACHMENT = Schema("attachment").define(
    {
        "id": NUMERIC_ID, "filename": STR, "size": INT, "url": STR, "proxy_url": STR, "content_type": MIME,
        "height": Nullable(INT), "width": Nullable(INT), "description": STR, "ephemeral": BOOL,
        "duration_secs": NUMBER, "waveform": STR, "flags": INT, "title": STR,
    },
    required=("id", "filename", "size", "url", "proxy_url"),
)
_EMBED_PART = Schema("embed part").define({"url": STR, "proxy_url": STR, "height": INT, "width": INT, "name": STR,
                                           "icon_url": STR, "text": STR})
EMBED = Schema("embed", keep_unknown=False).define(
    {
        "title": STR, "type": STR, "description": STR, "url": STR, "timestamp": ISO_TIME, "color": INT,
        "footer": _EMBED_PART, "image": _EMBED_PART, "thumbnail": _EMBED_PART, "video": _EMBED_PART,
        "provider": _EMBED_PART, "author": _EMBED_PART,
        "fields": ListOf(Schema("embed field").define({"name": STR, "value": STR, "inline": BOOL},
                                                      required=("name", "value"))),
    },
)
STICKER_ITEM = Schema("sticker").define(
    {"id": NUMERIC_ID, "name": STR, "format_type": INT}, required=("id", "name", "format_type")
)
EMOJI = Schema("emoji").define({"id": Nullable(NUMERIC_ID), "name": Nullable(STR), "animated": BOOL})
REACTION = Schema("reaction").define(
    {"count": INT, "me": BOOL, "emoji": EMOJI, "burst_count": INT, "me_burst": BOOL},
    required=("count", "me", "emoji"),
)
REFERENCE = Schema("message reference").define(
    {"message_id": NUMERIC_ID, "channel_id": NUMERIC_ID, "guild_id": NUMERIC_ID, "type": INT,
     "fail_if_not_exists": BOOL},
    required=("channel_id",),
)
THREAD = Schema("thread").define(
    {"id": NUMERIC_ID, "parent_id": NUMERIC_ID, "guild_id": NUMERIC_ID, "owner_id": NUMERIC_ID, "name": STR,
     "type": INT},
    required=("id",),
)
MESSAGE = Schema("message")
MESSAGE.define(
    {
        "id": NUMERIC_ID, "channel_id": NUMERIC_ID, "guild_id": NUMERIC_ID, "type": INT, "content": Default(STR, ""),
        "author": USER, "member": MEMBER, "mentions": Default(ListOf(MENTION), list), "mention_roles": SNOWFLAKES,
        "attachments": Default(ListOf(ATTACHMENT), list), "embeds": Default(ListOf(EMBED), list),
        "sticker_items": ListOf(STICKER_ITEM), "reactions": ListOf(REACTION), "timestamp": ISO_TIME,
        "edited_timestamp": Nullable(ISO_TIME), "webhook_id": NUMERIC_ID, "application_id": NUMERIC_ID,
        "message_reference": REFERENCE, "referenced_message": Nullable(MESSAGE), "flags": INT, "pinned": BOOL,
        "tts": BOOL, "mention_everyone": BOOL, "position": INT, "thread": THREAD,
    },
    required=("id", "channel_id", "type", "author"),
)
MESSAGE_DELETE = Schema("message delete").define(
    {"id": NUMERIC_ID, "channel_id": NUMERIC_ID, "guild_id": NUMERIC_ID}, required=("id", "channel_id")
)
MESSAGE_DELETE_BULK = Schema("bulk message delete").define(
    {"ids": SNOWFLAKES, "channel_id": NUMERIC_ID, "guild_id": NUMERIC_ID}, required=("ids", "channel_id")
)
REACTION_EVENT = Schema("reaction event").define(
    {
        "user_id": NUMERIC_ID, "channel_id": NUMERIC_ID, "message_id": NUMERIC_ID, "guild_id": NUMERIC_ID,
        "emoji": EMOJI, "member": MEMBER, "burst": BOOL, "type": INT, "message_author_id": NUMERIC_ID,
    },
    required=("user_id", "channel_id", "message_id", "emoji"),
)
MEMBER_REMOVE = Schema("member remove").define(
    {"guild_id": NUMERIC_ID, "user": USER}, required=("guild_id", "user")
)
MEMBER_ADD = Schema("member add").define(
    {**MEMBER.fields, "guild_id": NUMERIC_ID, "user": USER}, required=("guild_id", "user")
)
THREAD_CREATE = Schema("thread create").define(
    {**THREAD.fields, "newly_created": BOOL}, required=("id", "guild_id")
)

#: The dispatches the adapter handles, by gateway event name.
DISPATCHES: dict[str, Spec] = {
    "MESSAGE_CREATE": MESSAGE,
    "MESSAGE_UPDATE": MESSAGE,
    "MESSAGE_DELETE": MESSAGE_DELETE,
    "MESSAGE_DELETE_BULK": MESSAGE_DELETE_BULK,
    "MESSAGE_REACTION_ADD": REACTION_EVENT,
    "MESSAGE_REACTION_REMOVE": REACTION_EVENT,
    "GUILD_MEMBER_ADD": MEMBER_ADD,
    "GUILD_MEMBER_REMOVE": MEMBER_REMOVE,
    "THREAD_CREATE": THREAD_CREATE,
}
