"""Email's bot.yaml section: an IMAP mailbox to read and an SMTP server to send through."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional

from botweave.config import BotConfig, PlatformConfig, Section
from pydantic import Field, SecretStr, field_validator


class ImapSettings(Section):
    host: str = ""
    """The IMAP server, e.g. `imap.example.com`."""
    port: Optional[Annotated[int, Field(ge=1, le=65535)]] = None
    """Its port; unset: 993 with `ssl`, 143 otherwise."""
    user: str = ""
    """The mailbox's login name."""
    password: Optional[SecretStr] = None
    """The mailbox's password or app password (write `${IMAP_PASSWORD}`)."""
    folder: str = "INBOX"
    """The folder new mail is read from."""
    ssl: bool = True
    """Connect over TLS from the first byte (IMAPS); switch off only for a server on this machine."""
    starttls: bool = False
    """With `ssl: false`: upgrade the plain connection with STARTTLS."""

    def effective_port(self) -> int:
        return self.port or (993 if self.ssl else 143)


class SmtpSettings(Section):
    host: str = ""
    """The SMTP server replies are sent through, e.g. `smtp.example.com`."""
    port: Optional[Annotated[int, Field(ge=1, le=65535)]] = None
    """Its port; unset: 465 with `ssl`, 587 with `starttls`, else 25."""
    user: str = ""
    """The login name; empty: send without logging in (a relay on this machine)."""
    password: Optional[SecretStr] = None
    """The password (write `${SMTP_PASSWORD}`)."""
    ssl: bool = False
    """Connect over TLS from the first byte (port 465)."""
    starttls: bool = True
    """Upgrade the connection with STARTTLS before logging in (port 587); switch off only for a
    server on this machine."""

    def effective_port(self) -> int:
        return self.port or (465 if self.ssl else 587 if self.starttls else 25)


class EmailConfig(PlatformConfig):
    """An email address the bot answers: each thread of mail is a conversation."""

    required_credentials: ClassVar[tuple[str, ...]] = ()
    # Anyone can write to an address: strangers are refused unless the owner says otherwise.
    default_unknown_user_policy: ClassVar[Literal["deny", "pair", "allow"]] = "deny"

    address: str = ""
    """The bot's own address: replies come From it, and mail From it is never answered."""
    name: str = "botweave"
    """The name shown beside the address in replies (an agent in a room shows its own)."""
    imap: ImapSettings = Field(default_factory=ImapSettings)
    """Where mail is read."""
    smtp: SmtpSettings = Field(default_factory=SmtpSettings)
    """Where replies are sent."""
    allowed_senders: list[str] = Field(default_factory=list)
    """Addresses (`ann@example.com`) or whole domains (`@example.com`) whose mail is answered;
    mail from anyone else is marked processed and never reaches an agent. Empty: every sender
    that passes authentication, subject to the access rules (`unknown_user_policy`, which
    defaults to deny here)."""
    require_authentication: bool = True
    """Answer only mail whose `Authentication-Results` header (added by your own mail server)
    shows DMARC pass, or DKIM or SPF pass for the From domain: a forged From gets nothing.
    Switch off only where the server does not add the header."""
    trusted_authserv_id: Optional[str] = None
    """The authserv-id your mail server writes into `Authentication-Results`; set, only a
    header naming it counts (a sender cannot slip in one of their own)."""
    poll_seconds: Annotated[float, Field(gt=0)] = 60.0
    """How often the folder is searched: the only way to notice new mail where the server
    offers no IDLE, and a safety net where it does (IDLE wakes the bot at once)."""
    processed_flag: str = "$Botweave"
    """The IMAP keyword set on each mail once it is taken, so no restart answers it twice."""

    def missing_credentials(self) -> list[str]:
        missing = []
        if not self.address.strip():
            missing.append("address")
        if not self.imap.host.strip():
            missing.append("imap.host")
        if self.imap.password is None or not self.imap.password.get_secret_value().strip():
            missing.append("imap.password")
        if not self.smtp.host.strip():
            missing.append("smtp.host")
        return missing

    def bot_config(self, defaults: BotConfig) -> BotConfig:
        """Senders on `allowed_senders` are let in without pairing (the list is the allowlist,
        checked with the server's authentication before anything else); with no list and no
        policy set, strangers are refused: anyone can write to an address."""
        merged = super().bot_config(defaults)
        if self.unknown_user_policy is None and defaults.unknown_user_policy is None and self.allowed_senders:
            merged = merged.model_copy(update={"unknown_user_policy": "allow"})
        return merged

    @field_validator("processed_flag")
    @classmethod
    def _keyword(cls, flag: str) -> str:
        if not flag or any(c in flag for c in ' ()"{%*\\]') or flag.startswith("\\"):
            raise ValueError(f"{flag!r} is not an IMAP keyword: use letters, digits and $ (e.g. $Botweave)")
        return flag
