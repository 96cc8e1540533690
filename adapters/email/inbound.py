"""Receiving mail: one thread holds the IMAP connection and hands each new mail to the loop.

imap-tools is blocking, so the connection lives in a thread of its own. It waits for news
with IDLE where the server offers it (looking every second whether to stop) and searches the
folder again every `poll_seconds` whether or not IDLE said anything, which is all it does on a
server without IDLE. Each mail is read, judged (our own, automatic, a sender not
allowed, a From the server did not vouch for: none of these reaches an agent), handed to
the runtime on the event loop, and only then marked with `processed_flag` on the server: a
restart reads the folder again and answers exactly the mail that was never taken. What was
in the folder before the bot first started is left alone (the UID it started from is kept
in the store).
"""

from __future__ import annotations

import asyncio
import imaplib
import logging
import threading
import time
from collections.abc import Coroutine
from datetime import datetime, timezone
from typing import Any, TypeVar

from botweave.adapter import Adapter
from botweave.types import META_CONVERSATION, BotChannel, BotMessage, BotUser, MessageType, QuotedRef
from imap_tools.errors import MailboxLoginError
from imap_tools.mailbox import BaseMailBox

from . import imap
from .config import EmailConfig
from .mail import Mail, allowed, authenticated, parse
from .records import Records

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A mail larger than this is not fetched (its sender is not answered): a mailbox can hold
#: anything, and the whole message is read into memory to be parsed.
MAX_MAIL_BYTES = 50 * 1024 * 1024
#: RFC 2177: an IDLE is renewed well within the 29 minutes after which a server may drop it.
IDLE_RENEW_S = 20 * 60.0
#: How often a thread waiting in IDLE looks whether it should stop.
STOP_CHECK_S = 1.0
#: Pauses between reconnections after the connection broke, growing to the last.
RECONNECT_PAUSES = (1.0, 2.0, 5.0, 15.0, 30.0)
#: How long the thread waits for the loop to take one mail before trying it again later.
HANDOFF_TIMEOUT_S = 120.0


class MailReader:
    """The receiving thread of one mailbox; see the module docstring."""

    def __init__(self, adapter: Adapter, config: EmailConfig, records: Records) -> None:
        self.adapter = adapter
        self.config = config
        self.records = records
        self.address = config.address.strip().lower()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Why the mailbox cannot be read right now; None while it can.
        self.problem: str | None = "not connected yet"
        self.connected = threading.Event()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="botweave email reader", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 10.0)

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                box = imap.open_mailbox(self.config.imap)
            except MailboxLoginError:
                self.problem = "the IMAP server refused the login"
                log.error("email: the IMAP server refused the login; check platforms.email.imap.user and password")
            except (OSError, imaplib.IMAP4.error) as exc:
                self.problem = f"cannot reach the IMAP server ({type(exc).__name__})"
                log.warning("email: cannot reach the IMAP server: %s: %s", type(exc).__name__, exc)
            else:
                try:
                    self._serve(box)
                    failures = 0
                except (OSError, imaplib.IMAP4.error, EOFError) as exc:
                    self.problem = f"the IMAP connection broke ({type(exc).__name__})"
                    log.warning("email: the IMAP connection broke: %s: %s; reconnecting", type(exc).__name__, exc)
                finally:
                    self._close(box)
            if self._stop.is_set():
                break
            self._stop.wait(RECONNECT_PAUSES[min(failures, len(RECONNECT_PAUSES) - 1)])
            failures += 1

    def _close(self, box: BaseMailBox) -> None:
        try:
            box.logout()
        except (OSError, imaplib.IMAP4.error, EOFError):
            pass

    def _serve(self, box: BaseMailBox) -> None:
        folder = self.config.imap.folder
        validity, uid_next = imap.uid_state(box, folder)
        floor = self._floor(folder, validity, uid_next)
        idle = "IDLE" in box.client.capabilities
        self.problem = None
        self.connected.set()
        log.info("email: reading %s as %s (%s)", folder, self.address, "IDLE" if idle else "polling")
        while not self._stop.is_set():
            for uid in imap.unprocessed(box, floor, self.config.processed_flag):
                if self._stop.is_set() or not self._take(box, validity, uid):
                    break
            if idle:
                self._idle(box)
            else:
                self._stop.wait(self.config.poll_seconds)

    def _floor(self, folder: str, validity: int, uid_next: int) -> int:
        """The first UID to read: where the bot first started in this folder; 1 when the
        folder was rebuilt since (UIDVALIDITY changed: the flags still tell what was taken)."""
        recorded = self._call(self.records.floor(folder))
        if recorded is None:
            self._call(self.records.set_floor(folder, validity, uid_next))
            return uid_next
        known_validity, uid = recorded
        if known_validity != validity:
            self._call(self.records.set_floor(folder, validity, 1))
            return 1
        return uid

    def _idle(self, box: BaseMailBox) -> None:
        """Wait in IDLE until the server reports news, the renewal is due, or a stop."""
        box.idle.start()
        try:
            # The folder is searched again every `poll_seconds` even in IDLE: a notice the
            # server sent between the last search and this IDLE is not waited for.
            until = time.monotonic() + min(IDLE_RENEW_S, self.config.poll_seconds)
            while not self._stop.is_set() and time.monotonic() < until:
                if any(b"EXISTS" in line or b"RECENT" in line for line in box.idle.poll(timeout=STOP_CHECK_S)):
                    return
        finally:
            box.idle.stop()

    def _take(self, box: BaseMailBox, validity: int, uid: int) -> bool:
        """Read, judge and hand on one mail, then mark it taken; False when the runtime did
        not take it (it is tried again on the next round)."""
        flag = self.config.processed_flag
        size = imap.size_of(box, uid)
        if size is not None and size > MAX_MAIL_BYTES:
            log.warning("email: skipped mail uid %s of %d bytes, over the %d this bot reads", uid, size, MAX_MAIL_BYTES)
            imap.mark(box, uid, flag)
            return True
        raw = imap.fetch(box, uid)
        if raw is None:
            return True  # gone meanwhile (moved or deleted by someone else)
        mail = parse(raw, fallback_id=f"{validity}.{uid}@{self.address.rpartition('@')[2] or 'imap'}")
        refused = self._refusal(mail)
        if refused:
            log.info("email: mail uid %s not answered: %s", uid, refused)
            imap.mark(box, uid, flag)
            return True
        taken = self._call(self._hand_on(mail, validity, uid), timeout=HANDOFF_TIMEOUT_S)
        if taken:
            imap.mark(box, uid, flag)
        return taken

    def _refusal(self, mail: Mail) -> str:
        if not mail.sender:
            return "it has no From address"
        if mail.sender == self.address:
            return "it is from the bot's own address"
        if mail.automatic:
            return "it was sent by a program (Auto-Submitted, Precedence or a bounce)"
        if not allowed(mail.sender, self.config.allowed_senders):
            return "the sender is not in allowed_senders"
        if self.config.require_authentication and not authenticated(mail, authserv_id=self.config.trusted_authserv_id):
            return "its Authentication-Results do not vouch for the From (SPF/DKIM/DMARC)"
        return ""

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # --- on the loop --------------------------------------------------------------------

    async def _hand_on(self, mail: Mail, validity: int, uid: int) -> bool:
        folder = self.config.imap.folder
        attachments = [
            {
                "file_id": f"{validity}:{uid}:{part.section}",
                "folder": folder,
                "uid": uid,
                "uidvalidity": validity,
                "section": part.section,
                "encoding": part.encoding,
                "filename": part.filename,
                "mime": part.mime,
                "size": part.size,
            }
            for part in mail.parts
        ]
        quoted = await self._quoted(mail.in_reply_to)
        await self.records.extend_thread(mail.root, mail.subject, *mail.chain)
        await self.records.remember(mail.message_id, author="user", attachments=attachments)
        msg = BotMessage(
            message_id=mail.message_id,
            content=mail.text,
            sender=BotUser(mail.sender, mail.sender, mail.sender_name),
            channel=BotChannel(mail.sender, "dm", mail.subject),
            message_type=_message_type(attachments),
            # When the bot took the mail, not when it was written: a mail answered hours later
            # (the bot was down) is normal for email, never "stale".
            timestamp=datetime.now(timezone.utc),
            reply_to=mail.in_reply_to,
            thread_id=mail.root,
            attachments=attachments,
            quoted=quoted,
            # A thread is a conversation of its own, not the person's one direct conversation.
            metadata={"subject": mail.subject, META_CONVERSATION: f"email:{mail.sender}:{mail.root}"},
            platform="email",
        )
        return await self.adapter.dispatch(msg)

    async def _quoted(self, message_id: str | None) -> QuotedRef | None:
        if message_id is None:
            return None
        known = await self.records.message(message_id)
        if known is None:
            return None
        # Its words are in the thread's history already; what a quote adds is its files.
        return QuotedRef(
            message_id=message_id,
            author=str(known.get("author", "user")),
            attachments=tuple(a for a in known.get("attachments", []) if isinstance(a, dict)),
        )


def _message_type(attachments: list[dict[str, Any]]) -> MessageType:
    mimes = [str(a.get("mime") or "") for a in attachments]
    if not mimes:
        return MessageType.TEXT
    if all(m.startswith("image/") for m in mimes):
        return MessageType.IMAGE
    if all(m.startswith("audio/") for m in mimes):
        return MessageType.AUDIO
    return MessageType.FILE
