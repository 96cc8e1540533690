"""The mailbox side, through imap-tools (blocking: every call here runs in a thread).

`Mailbox` opens one logged-in connection with the configured TLS, and answers the few
questions the bot asks of a folder: what is new, the bytes of one message or one part, and
"mark this one taken".
"""

from __future__ import annotations

import base64
import binascii
import quopri
import re
import ssl
from collections.abc import Iterator

from imap_tools import MailBox, MailBoxStartTls, MailBoxUnencrypted
from imap_tools.mailbox import BaseMailBox

from .config import ImapSettings

#: Seconds a blocking IMAP call may take before the connection counts as broken.
IMAP_TIMEOUT_S = 30.0


def open_mailbox(settings: ImapSettings) -> BaseMailBox:
    """A connection logged in and on the configured folder (raises on refusal)."""
    host, port = settings.host, settings.effective_port()
    box: BaseMailBox
    if settings.ssl:
        box = MailBox(host, port, timeout=IMAP_TIMEOUT_S, ssl_context=ssl.create_default_context())
    elif settings.starttls:
        box = MailBoxStartTls(host, port, timeout=IMAP_TIMEOUT_S, ssl_context=ssl.create_default_context())
    else:
        box = MailBoxUnencrypted(host, port, timeout=IMAP_TIMEOUT_S)
    password = settings.password.get_secret_value() if settings.password is not None else ""
    box.login(settings.user, password, initial_folder=settings.folder)
    return box


def uid_state(box: BaseMailBox, folder: str) -> tuple[int, int]:
    """The folder's (UIDVALIDITY, UIDNEXT)."""
    status = box.folder.status(folder, ["UIDVALIDITY", "UIDNEXT"])
    return int(status["UIDVALIDITY"]), int(status["UIDNEXT"])


def unprocessed(box: BaseMailBox, floor: int, flag: str) -> list[int]:
    """UIDs from `floor` on that do not carry `flag`, oldest first."""
    typ, data = box.client.uid("SEARCH", f"UID {floor}:* UNKEYWORD {flag}")
    if typ != "OK":
        raise OSError(f"UID SEARCH failed: {typ}")
    found = [int(n) for chunk in data if chunk for n in chunk.split() if n.isdigit()]
    return sorted(uid for uid in found if uid >= floor)  # `n:*` always names the last mail too


def size_of(box: BaseMailBox, uid: int) -> int | None:
    typ, data = box.client.uid("FETCH", str(uid), "(RFC822.SIZE)")
    for item in data:
        line = item[0] if isinstance(item, tuple) else item
        if isinstance(line, bytes) and (found := re.search(rb"RFC822\.SIZE (\d+)", line)):
            return int(found.group(1))
    return None


def fetch(box: BaseMailBox, uid: int, section: str = "") -> bytes | None:
    """A whole message (`section` empty) or one MIME part's body as stored (still in its
    transfer encoding), without marking anything seen; None when the UID is gone."""
    typ, data = box.client.uid("FETCH", str(uid), f"(BODY.PEEK[{section}])")
    if typ != "OK":
        return None
    for item in data:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], bytes) and b"BODY[" in item[0]:
            return bytes(item[1])
    return None


def mark(box: BaseMailBox, uid: int, flag: str) -> None:
    box.client.uid("STORE", str(uid), "+FLAGS", f"({flag})")


def decode_part(body: bytes, encoding: str) -> bytes:
    """A part's bytes from its Content-Transfer-Encoding."""
    encoding = encoding.lower()
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=False)
        except binascii.Error:
            return b""
    if encoding == "quoted-printable":
        return quopri.decodestring(body)
    return body


def chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]
