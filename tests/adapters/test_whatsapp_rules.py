"""WhatsApp's pure rules as tables: the 24-hour window, who sent a message (phone numbers and
the 2026 business-scoped ids), how a recipient is addressed, and Markdown written WhatsApp's way."""

from __future__ import annotations

import pytest
from botweave.adapters.whatsapp.format import one_line, to_whatsapp
from botweave.adapters.whatsapp.inbound import sender_ids
from botweave.adapters.whatsapp.memory import window_open
from botweave.adapters.whatsapp.outbound import address, media_kind
from botweave.adapters.whatsapp.webhook import signature_of, signed

HOUR = 3600.0
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("last", "hours", "open_"),
    [
        (None, 24, False),  # never wrote
        (NOW, 24, True),
        (NOW - 23.9 * HOUR, 24, True),
        (NOW - 24 * HOUR, 24, False),  # the window is 24 hours, not a second more
        (NOW - 30 * HOUR, 24, False),
        (NOW - 23 * HOUR, 22, False),  # a margin the operator chose
        (NOW + 60, 24, False),  # a mark from the future (a wrong clock) opens nothing
    ],
)
def test_the_customer_service_window(last: float | None, hours: float, open_: bool) -> None:
    assert window_open(last, NOW, hours) is open_


@pytest.mark.parametrize(
    ("message", "contacts", "expected"),
    [
        # before the business-scoped ids: a number only
        ({"from": "16505551234"}, [{"wa_id": "16505551234", "profile": {"name": "Ann"}}], ("16505551234", "")),
        # 2026: both, beside each other
        (
            {"from": "16505551234", "from_user_id": "US.1349"},
            [{"wa_id": "16505551234", "user_id": "US.1349"}],
            ("16505551234", "US.1349"),
        ),
        # 2026, number not shared: the id only, in the message or in contacts only
        ({"from_user_id": "US.1349"}, [{"user_id": "US.1349"}], ("", "US.1349")),
        ({}, [{"user_id": "US.1349", "profile": {"name": "Caro"}}], ("", "US.1349")),
        # `from` holding the id where a number would be
        ({"from": "US.1349"}, [], ("", "US.1349")),
        # no contacts at all (system-like payloads), a plus sign in front
        ({"from": "+447700900123"}, [], ("447700900123", "")),
        # two contacts: the one naming the sender is picked
        (
            {"from": "2"},
            [{"wa_id": "1", "user_id": "US.1"}, {"wa_id": "2", "user_id": "US.2"}],
            ("2", "US.2"),
        ),
        # garbage
        ({"from": 5}, ["x", None], ("5", "")),
        ({}, [], ("", "")),
    ],
)
def test_who_sent_a_message(message: dict, contacts: list, expected: tuple[str, str]) -> None:
    phone, user_id, _ = sender_ids(message, contacts)
    assert (phone, user_id) == expected


@pytest.mark.parametrize(
    ("chat", "expected"),
    [
        ("16505551234", {"recipient_type": "individual", "to": "16505551234"}),
        ("+16505551234", {"recipient_type": "individual", "to": "16505551234"}),
        ("US.13491208655302741918", {"recipient_type": "individual", "recipient": "US.13491208655302741918"}),
    ],
)
def test_recipients_are_addressed_by_number_or_by_business_scoped_id(chat: str, expected: dict) -> None:
    assert address(chat) == expected


@pytest.mark.parametrize(
    ("mime", "kind"),
    [("image/png", "image"), ("image/jpeg", "image"), ("image/webp", "document"), ("audio/ogg", "audio"),
     ("video/mp4", "video"), ("application/pdf", "document"), ("text/plain", "document")],
)
def test_files_go_out_as_the_kind_whatsapp_shows(mime: str, kind: str) -> None:
    assert media_kind(mime) == kind


@pytest.mark.parametrize(
    ("markdown", "whatsapp"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("~~gone~~", "~gone~"),
        ("## Heading ##\ntext", "*Heading*\ntext"),
        ("[docs](https://x.test) and [https://y.test](https://y.test)", "docs (https://x.test) and https://y.test"),
        ("`**kept**` and\n```\n**kept too**\n```", "`**kept**` and\n```\n**kept too**\n```"),
        (r"<br> &amp; $5 a || b \d+ 2 * 3 * 4", r"<br> &amp; $5 a || b \d+ 2 * 3 * 4"),
    ],
)
def test_markdown_is_written_the_whatsapp_way(markdown: str, whatsapp: str) -> None:
    assert to_whatsapp(markdown) == whatsapp


def test_a_template_parameter_is_one_line_within_its_limit() -> None:
    assert one_line("a\nb\t c     d", 100) == "a b c d"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def test_signatures_are_hmac_sha256_of_the_raw_body() -> None:
    body = b'{"object":"whatsapp_business_account"}'
    header = signature_of(b"secret", body)
    assert header.startswith("sha256=") and len(header) == 7 + 64
    assert signed(b"secret", body, header)
    assert not signed(b"other", body, header)
    assert not signed(b"secret", body + b" ", header)
    assert not signed(b"secret", body, None) and not signed(b"secret", body, "")
    assert not signed(b"secret", body, header.upper())
