"""The Bot API fields the adapter reads, as a schema applied before python-telegram-bot parses.

PTB stores most scalar fields as it finds them, so a `text` that is a number, or a `chat.id`
that is an object, would surface later as an exception in the handler or in the update
processor. `read_update` sanitises the raw update first (`botweave.payload`): a wrong-typed
field is absent, an object without what it cannot do without (a message without its chat)
is absent, strings are safe for the model call. What is left is parsed by PTB; an update it
still refuses is skipped with one log line by the caller.

Required fields follow PTB's constructors, so an object that passes the schema also passes
PTB; variants (message origins, reaction types) state which fields each kind needs.
"""

from __future__ import annotations

from typing import Any

from botweave.payload import BOOL, INT, MIME, NUMBER, STR, TIMESTAMP, Dropped, ListOf, Schema, Spec, sanitise
from telegram import Bot, Update

USER = Schema("User").define(
    {"id": INT, "is_bot": BOOL, "first_name": STR, "last_name": STR, "username": STR},
    required=("id", "is_bot", "first_name"),
)
CHAT = Schema("Chat").define(
    {"id": INT, "type": STR, "title": STR, "username": STR, "first_name": STR, "last_name": STR, "is_forum": BOOL},
    required=("id", "type"),
)
ENTITY = Schema("MessageEntity").define(
    {"type": STR, "offset": INT, "length": INT, "user": USER, "url": STR, "language": STR, "custom_emoji_id": STR},
    required=("type", "offset", "length"),
)
_FILE: dict[str, Spec] = {"file_id": STR, "file_unique_id": STR, "file_size": INT}
_FILE_IDS = ("file_id", "file_unique_id")
PHOTO = Schema("PhotoSize").define({**_FILE, "width": INT, "height": INT}, required=(*_FILE_IDS, "width", "height"))
_VISUAL: dict[str, Spec] = {
    **_FILE, "width": INT, "height": INT, "duration": INT, "file_name": STR, "mime_type": MIME, "thumbnail": PHOTO,
}
ANIMATION = Schema("Animation").define(_VISUAL, required=(*_FILE_IDS, "width", "height", "duration"))
VIDEO = Schema("Video").define(_VISUAL, required=(*_FILE_IDS, "width", "height", "duration"))
VIDEO_NOTE = Schema("VideoNote").define(
    {**_FILE, "length": INT, "duration": INT, "thumbnail": PHOTO}, required=(*_FILE_IDS, "length", "duration")
)
VOICE = Schema("Voice").define({**_FILE, "duration": INT, "mime_type": MIME}, required=(*_FILE_IDS, "duration"))
AUDIO = Schema("Audio").define(
    {**_FILE, "duration": INT, "performer": STR, "title": STR, "file_name": STR, "mime_type": MIME, "thumbnail": PHOTO},
    required=(*_FILE_IDS, "duration"),
)
DOCUMENT = Schema("Document").define(
    {**_FILE, "file_name": STR, "mime_type": MIME, "thumbnail": PHOTO}, required=_FILE_IDS
)
STICKER = Schema("Sticker").define(
    {**_FILE, "type": STR, "width": INT, "height": INT, "is_animated": BOOL, "is_video": BOOL, "emoji": STR},
    required=(*_FILE_IDS, "type", "width", "height", "is_animated", "is_video"),
)
LOCATION = Schema("Location").define({"longitude": NUMBER, "latitude": NUMBER}, required=("longitude", "latitude"))
VENUE = Schema("Venue").define(
    {"location": LOCATION, "title": STR, "address": STR}, required=("location", "title", "address")
)
CONTACT = Schema("Contact").define(
    {"phone_number": STR, "first_name": STR, "last_name": STR, "user_id": INT, "vcard": STR},
    required=("phone_number", "first_name"),
)
QUOTE = Schema("TextQuote").define(
    {"text": STR, "position": INT, "entities": ListOf(ENTITY), "is_manual": BOOL}, required=("text", "position")
)
#: Which field each kind of message origin cannot do without.
_ORIGIN_NEEDS = {
    "user": ("sender_user",),
    "hidden_user": ("sender_user_name",),
    "chat": ("sender_chat",),
    "channel": ("chat", "message_id"),
}
ORIGIN = Schema("MessageOrigin").define(
    {
        "type": STR, "date": TIMESTAMP, "sender_user": USER, "sender_user_name": STR, "sender_chat": CHAT,
        "chat": CHAT, "message_id": INT, "author_signature": STR,
    },
    required=("type", "date"),
    rule=lambda o: o["type"] in _ORIGIN_NEEDS and all(k in o for k in _ORIGIN_NEEDS[o["type"]]),
)
EXTERNAL_REPLY = Schema("ExternalReplyInfo").define(
    {"origin": ORIGIN, "chat": CHAT, "message_id": INT}, required=("origin",)
)
TOPIC_CREATED = Schema("ForumTopicCreated").define(
    {"name": STR, "icon_color": INT, "icon_custom_emoji_id": STR}, required=("name", "icon_color")
)
MESSAGE = Schema("Message")
MESSAGE.define(
    {
        "message_id": INT, "date": TIMESTAMP, "chat": CHAT, "from": USER, "sender_chat": CHAT,
        "message_thread_id": INT, "is_topic_message": BOOL, "text": STR, "caption": STR,
        "entities": ListOf(ENTITY), "caption_entities": ListOf(ENTITY), "photo": ListOf(PHOTO),
        "animation": ANIMATION, "video": VIDEO, "video_note": VIDEO_NOTE, "voice": VOICE, "audio": AUDIO,
        "sticker": STICKER, "document": DOCUMENT, "venue": VENUE, "location": LOCATION, "contact": CONTACT,
        "reply_to_message": MESSAGE, "quote": QUOTE, "external_reply": EXTERNAL_REPLY, "forward_origin": ORIGIN,
        "is_automatic_forward": BOOL, "via_bot": USER, "new_chat_members": ListOf(USER),
        "left_chat_member": USER, "forum_topic_created": TOPIC_CREATED, "pinned_message": MESSAGE,
        "migrate_to_chat_id": INT, "migrate_from_chat_id": INT, "group_chat_created": BOOL,
        "supergroup_chat_created": BOOL, "new_chat_title": STR, "new_chat_photo": ListOf(PHOTO),
        "delete_chat_photo": BOOL, "edit_date": TIMESTAMP,
    },
    required=("message_id", "date", "chat"),
)
#: Which field each kind of reaction cannot do without.
_REACTION_NEEDS = {"emoji": ("emoji",), "custom_emoji": ("custom_emoji_id",), "paid": ()}
REACTION = Schema("ReactionType").define(
    {"type": STR, "emoji": STR, "custom_emoji_id": STR},
    required=("type",),
    rule=lambda r: r["type"] in _REACTION_NEEDS and all(k in r for k in _REACTION_NEEDS[r["type"]]),
)
MESSAGE_REACTION = Schema("MessageReactionUpdated").define(
    {
        "chat": CHAT, "message_id": INT, "date": TIMESTAMP, "old_reaction": ListOf(REACTION),
        "new_reaction": ListOf(REACTION), "user": USER, "actor_chat": CHAT,
    },
    required=("chat", "message_id", "date", "old_reaction", "new_reaction"),
)
CHAT_MEMBER = Schema("ChatMember").define(
    {"status": STR, "user": USER, "is_member": BOOL, "until_date": TIMESTAMP}, required=("status", "user")
)
CHAT_MEMBER_UPDATED = Schema("ChatMemberUpdated").define(
    {"chat": CHAT, "from": USER, "date": TIMESTAMP, "old_chat_member": CHAT_MEMBER, "new_chat_member": CHAT_MEMBER},
    required=("chat", "from", "date", "old_chat_member", "new_chat_member"),
)
CALLBACK_QUERY = Schema("CallbackQuery").define(
    {"id": STR, "from": USER, "chat_instance": STR, "message": MESSAGE, "data": STR, "inline_message_id": STR},
    required=("id", "from", "chat_instance"),
)
UPDATE = Schema("Update").define(
    {
        "update_id": INT, "message": MESSAGE, "edited_message": MESSAGE, "channel_post": MESSAGE,
        "edited_channel_post": MESSAGE, "callback_query": CALLBACK_QUERY, "message_reaction": MESSAGE_REACTION,
        "chat_member": CHAT_MEMBER_UPDATED, "my_chat_member": CHAT_MEMBER_UPDATED,
    },
    required=("update_id",),
)


def sanitise_update(data: Any, dropped: Dropped | None = None) -> dict[str, Any] | None:
    """A raw update as `UPDATE` describes it; None when it has no usable `update_id`."""
    cleaned = sanitise(data, UPDATE, dropped)
    return cleaned if isinstance(cleaned, dict) else None


def read_update(data: Any, bot: Bot, dropped: Dropped | None = None) -> Update:
    """An `Update` from decoded JSON, sanitised first (what was left out is noted in
    `dropped`); raises ValueError, or whatever PTB raises, when there is none to be had, for
    the caller to log and skip."""
    cleaned = sanitise_update(data, dropped)
    if cleaned is None:
        raise ValueError("not an update object (no usable update_id)")
    update = Update.de_json(cleaned, bot)
    if update is None:
        raise ValueError("empty update")
    insert = getattr(bot, "insert_callback_data", None)  # ExtBot: arbitrary callback data
    if insert is not None:
        insert(update)
    return update
