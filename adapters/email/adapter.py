"""The email adapter: an IMAP mailbox read in a thread (inbound.py), replies by SMTP
(outbound.py). Each thread of mail is one conversation with its sender (`chat` is their
address, `thread` the thread's first Message-ID), so a follow-up sees the thread's history and
a new mail from the same person starts afresh."""

from __future__ import annotations

import asyncio
import imaplib
import logging
from typing import ClassVar

import aiosmtplib
from botweave.adapter import Adapter, Check, PlatformRejected
from botweave.types import AgentIdentity, BotUser, PlatformCapabilities
from imap_tools.errors import MailboxLoginError

from . import imap
from .config import EmailConfig
from .inbound import MailReader
from .outbound import SMTP_TIMEOUT_S, EmailOutbound
from .records import Records

log = logging.getLogger(__name__)

#: How long start waits for the first IMAP login before reporting the platform down.
CONNECT_TIMEOUT_S = 30.0


class EmailAdapter(Adapter):
    platform = "email"
    capabilities: ClassVar[PlatformCapabilities] = PlatformCapabilities(
        max_message_length=None,  # a mail is as long as it needs to be
        can_edit=False,
        can_delete=False,
        can_react=False,
        threads=True,
        typing=False,
        markdown="none",
        buttons=False,
    )

    def __init__(self, config: EmailConfig | None = None) -> None:
        super().__init__(config or EmailConfig())
        self.config: EmailConfig
        self.reader: MailReader | None = None

    @property
    def mode(self) -> str:
        return "imap"

    async def start(self, *, inbound: bool = True) -> None:
        for field in self.config.missing_credentials():
            raise PlatformRejected(f"email: platforms.email.{field} is not set")
        address = self.config.address.strip()
        self.self_user = BotUser(address.lower(), address, self.config.name, is_bot=True)
        records = Records(self.store, address)
        if inbound:
            reader = MailReader(self, self.config, records)
            reader.start()
            self.reader = reader
            connected = await asyncio.to_thread(reader.connected.wait, CONNECT_TIMEOUT_S)
            if not connected:
                problem = reader.problem
                await self.stop()
                if problem and "refused the login" in problem:
                    raise PlatformRejected(f"email: {problem}; check platforms.email.imap.user and password")
                raise RuntimeError(f"email: {problem or 'the IMAP server did not answer'}")
        self.outbound = EmailOutbound(self.config, records)

    async def stop(self) -> None:
        self.outbound = None
        reader, self.reader = self.reader, None
        if reader is not None:
            await reader.stop()

    async def readiness(self) -> str | None:
        problem = await super().readiness()
        if problem is None and self.reader is not None:
            return self.reader.problem
        return problem

    def direct_user(self, chat_id: str) -> str | None:
        """Every mail conversation is with one person: the chat is their address."""
        return chat_id if "@" in chat_id else None

    def name_prefix(self, identity: AgentIdentity) -> str:
        return f"{identity.name}: "

    async def diagnose(self) -> list[Check]:
        """An IMAP login (and the folder's status) and an SMTP login, without reading or
        sending any mail."""
        missing = self.config.missing_credentials()
        if missing:
            return [Check("email", False, f"platforms.email.{missing[0]} is not set",
                          f"set platforms.email.{missing[0]}")]
        checks = [await asyncio.to_thread(self._check_imap)]
        checks.append(await self._check_smtp())
        return checks

    def _check_imap(self) -> Check:
        settings = self.config.imap
        try:
            box = imap.open_mailbox(settings)
        except MailboxLoginError:
            return Check("email", False, "the IMAP server refused the login",
                         "set platforms.email.imap.user and imap.password")
        except (OSError, imaplib.IMAP4.error) as exc:
            return Check("email", False, f"cannot reach the IMAP server: {type(exc).__name__}: {exc}",
                         "check platforms.email.imap.host, port and ssl/starttls")
        try:
            imap.uid_state(box, settings.folder)
            idle = "IDLE" in box.client.capabilities
        finally:
            box.logout()
        how = "IDLE" if idle else f"polling every {self.config.poll_seconds:g}s"
        return Check("email", True, f"IMAP login accepted, {settings.folder} readable ({how})")

    async def _check_smtp(self) -> Check:
        smtp = self.config.smtp
        client = aiosmtplib.SMTP(
            hostname=smtp.host, port=smtp.effective_port(), use_tls=smtp.ssl,
            start_tls=smtp.starttls and not smtp.ssl, timeout=SMTP_TIMEOUT_S,
        )
        try:
            await client.connect()
            if smtp.user:
                password = smtp.password.get_secret_value() if smtp.password is not None else ""
                await client.login(smtp.user, password)
        except aiosmtplib.SMTPAuthenticationError:
            return Check("email smtp", False, "the SMTP server refused the login",
                         "set platforms.email.smtp.user and smtp.password")
        except (aiosmtplib.SMTPException, OSError) as exc:
            return Check("email smtp", False, f"cannot reach the SMTP server: {type(exc).__name__}: {exc}",
                         "check platforms.email.smtp.host, port and ssl/starttls")
        finally:
            if client.is_connected:
                try:
                    await client.quit()
                except aiosmtplib.SMTPException:
                    client.close()
        return Check("email smtp", True, f"SMTP server answers{' and accepts the login' if smtp.user else ''}")
