from datetime import datetime, timezone

import pytest
from botweave import BotChannel, BotMessage, BotUser, MessageType, PlatformEvent, QuotedRef

from tests.support import message


def quoted(text: str, body: str = "what about this?") -> BotMessage:
    return message(body, quoted=QuotedRef("42", text, "bot"))


def test_prompt_text_without_quote_is_the_text():
    assert message("hello").prompt_text == "hello"


def test_prompt_text_with_blank_quote_is_the_text():
    assert quoted("   \n\t ").prompt_text == "what about this?"
    assert quoted("").prompt_text == "what about this?"


def test_prompt_text_collapses_whitespace_in_the_quote():
    assert quoted("line one\n\n  line   two\t!").prompt_text == (
        '[In reply to: "line one line two !"]\nwhat about this?'
    )


def test_prompt_text_keeps_a_500_character_quote_whole():
    text = "x" * 500
    assert quoted(text).prompt_text == f'[In reply to: "{text}"]\nwhat about this?'


def test_prompt_text_cuts_a_501_character_quote_to_497_and_an_ellipsis():
    text = "y" * 501
    snippet = "y" * 497 + "…"
    assert quoted(text).prompt_text == f'[In reply to: "{snippet}"]\nwhat about this?'


def test_prompt_text_cut_happens_after_collapsing():
    # 300 words separated by runs of spaces collapse below the cap: nothing is cut.
    text = "   ".join(["ab"] * 150)
    assert "…" not in quoted(text).prompt_text


def test_prompt_text_with_empty_body_is_the_block_alone():
    assert quoted("the original", body="").prompt_text == '[In reply to: "the original"]'


def test_text_from_dict_content():
    assert message("").text == ""
    msg = message("x")
    msg.content = {"text": "from dict", "extra": 1}
    assert msg.text == "from dict"
    msg.content = {"other": 1}
    assert msg.text == ""


@pytest.mark.parametrize(
    ("text", "command", "target", "args"),
    [
        ("/new", "new", None, []),
        ("/status@TheBot", "status", "TheBot", []),
        ("/pair approve ABCD2345", "pair", None, ["approve", "ABCD2345"]),
        ("/Help  me   now", "help", None, ["me", "now"]),
        ("hello /new", None, None, []),
        ("/", None, None, []),
    ],
)
def test_commands(text, command, target, args):
    msg = message(text)
    assert msg.is_command is (command is not None)
    assert msg.command == command
    assert msg.command_target == target
    assert msg.command_args == args


def test_bot_message_round_trips_every_field():
    msg = BotMessage(
        message_id="7",
        content={"text": "hi", "raw": [1, 2]},
        message_type=MessageType.IMAGE,
        sender=BotUser("u", "ann", "Ann", is_bot=True),
        channel=BotChannel("c", "thread", "Topic"),
        timestamp=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        reply_to="6",
        thread_id="t",
        attachments=[{"file_id": "f", "mime": "image/png", "size": 3, "filename": "a.png"}],
        quoted=QuotedRef("6", "earlier", "user"),
        metadata={"mentions_bot": True},
        allow_control=False,
        platform="telegram",
    )
    again = BotMessage.from_dict(msg.to_dict())
    assert again == msg
    assert again.to_dict() == msg.to_dict()


def test_quoted_ref_from_dict_defaults_missing_keys():
    assert QuotedRef.from_dict({}) == QuotedRef("", "", "")
    assert QuotedRef.from_dict({"text": "t"}) == QuotedRef("", "t", "")
    msg = BotMessage.from_dict({"message_id": "1", "content": "x", "quoted": {"author": "bot"}})
    assert msg.quoted == QuotedRef("", "", "bot")


def test_platform_event_to_dict_omits_raw_and_hook_payload_caps_new_text():
    event = PlatformEvent("message_edited", "slack", "C1", "U1", message_id="9", new_text="z" * 600, raw={"x": 1})
    assert "raw" not in event.to_dict()
    assert len(event.hook_payload()["new_text"]) == 500
    assert event.hook_event == "message_edited"
    assert PlatformEvent("reaction_removed", "slack", "C1", "U1").hook_event == "reaction_received"


def test_platform_event_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown PlatformEvent kind"):
        PlatformEvent("message_exploded", "slack", "C1", "U1")  # type: ignore[arg-type]
