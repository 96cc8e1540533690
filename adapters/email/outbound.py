"""Sending mail through SMTP (aiosmtplib) and reading attachments back through IMAP.

Every message the bot sends is a plain-text mail From its address. One that answers a thread
carries `Re: <subject>`, In-Reply-To and References, read from the thread's record in the
store, so it threads in every client whichever process sends it; one that starts a thread (a
schedule's post) takes its subject from its first line. A send keyed by delivery carries a
Message-ID made from the key, so a mail sent again after a crash is the same message to the
recipient's client. Mail cannot be edited, deleted or reacted to.
"""

from __future__ import annotations

import asyncio
import hashlib
import imaplib
import logging
import ssl
from collections.abc import AsyncGenerator, Mapping
from email.message import EmailMessage
from typing import Any

import aiosmtplib
from botweave.adapter import ActionError, ByteLimit, Outbound, Outcome
from botweave.types import AgentIdentity, OutboundFile

from . import imap
from .config import EmailConfig
from .mail import compose, first_line_subject, new_message_id, reply_subject
from .records import Records

log = logging.getLogger(__name__)

SMTP_TIMEOUT_S = 30.0


class EmailOutbound(Outbound):
    def __init__(self, config: EmailConfig, records: Records) -> None:
        self.config = config
        self.records = records
        self.address = config.address.strip()

    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        return await self._mail(chat_id, text, thread_id=thread_id, reply_to=reply_to)

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        digest = hashlib.sha256(key.encode()).hexdigest()[:32]
        domain = self.address.rpartition("@")[2] or "botweave.invalid"
        return await self._mail(chat_id, text, thread_id=thread_id, reply_to=reply_to, message_id=f"{digest}@{domain}")

    async def send_as(self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None) -> str | None:
        """The agent's name is the From's display name: mail shows its author's name."""
        return await self._mail(chat_id, text, thread_id=thread_id, reply_to=None, name=identity.name)

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        return await self._mail(
            chat_id, caption, thread_id=thread_id, reply_to=reply_to, files=((file.data, file.filename, file.mime),)
        )

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        return chat_id if "@" in chat_id else None

    async def _mail(
        self,
        to: str,
        text: str,
        *,
        thread_id: str | None,
        reply_to: str | None,
        name: str | None = None,
        message_id: str | None = None,
        files: tuple[tuple[bytes, str, str], ...] = (),
    ) -> str:
        if "@" not in to:
            raise ActionError("no_route", f"{to!r} is not an email address")
        thread = await self.records.thread(thread_id) if thread_id else None
        message_id = message_id or new_message_id(self.address)
        if thread is not None:
            subject = reply_subject(thread.subject)
            in_reply_to = reply_to or thread.last
            references = thread.references
        else:
            subject = first_line_subject(text) or (files[0][1] if files else "A message")
            in_reply_to, references = None, ()
        mail = compose(
            sender=self.address, sender_name=name or self.config.name, to=to, text=text, subject=subject,
            message_id=message_id, in_reply_to=in_reply_to, references=references, files=files,
        )
        await self._submit(mail)
        root = thread_id or message_id
        await self.records.extend_thread(root, subject, message_id)
        return message_id

    async def _submit(self, mail: EmailMessage) -> None:
        smtp = self.config.smtp
        password = smtp.password.get_secret_value() if smtp.password is not None else None
        await aiosmtplib.send(
            mail,
            hostname=smtp.host,
            port=smtp.effective_port(),
            username=smtp.user or None,
            password=password if smtp.user else None,
            use_tls=smtp.ssl,
            start_tls=smtp.starttls and not smtp.ssl,
            tls_context=ssl.create_default_context() if (smtp.ssl or smtp.starttls) else None,
            timeout=SMTP_TIMEOUT_S,
        )

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        """One attachment's bytes, fetched alone (its IMAP section) from the mail it came in."""
        data = await asyncio.to_thread(self._fetch_part, ref)
        for chunk in imap.chunks(data):
            yield chunk

    def _fetch_part(self, ref: Mapping[str, Any]) -> bytes:
        box = imap.open_mailbox(self.config.imap.model_copy(update={"folder": str(ref.get("folder") or "INBOX")}))
        try:
            validity, _ = imap.uid_state(box, str(ref.get("folder") or "INBOX"))
            if validity != ref.get("uidvalidity"):
                raise ActionError("failed", "the mailbox was rebuilt since the mail arrived; the file is gone")
            body = imap.fetch(box, int(ref["uid"]), str(ref["section"]))
        finally:
            try:
                box.logout()
            except (OSError, imaplib.IMAP4.error, EOFError):
                pass
        if body is None:
            raise ActionError("failed", "the mail is no longer in the mailbox")
        return imap.decode_part(body, str(ref.get("encoding") or "7bit"))

    def classify(self, exc: Exception, action: str) -> Outcome:
        if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
            return "no_route", "the mail server refused the address"
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError):
            return "failed", "the SMTP server refused the login (platforms.email.smtp.user / password)"
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            return "failed", f"SMTP {exc.code}: {exc.message[:200]}"
        log.warning("email: %s failed: %s", action, type(exc).__name__)
        if action == "send":
            return "failed", f"{type(exc).__name__}; may have been delivered"
        return "failed", type(exc).__name__

    def retryable(self, exc: Exception) -> bool:
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            return 400 <= exc.code < 500  # 4xx: try again later; 5xx: refused for good
        return super().retryable(exc)
