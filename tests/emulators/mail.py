"""A mail server on 127.0.0.1 for the email adapter: IMAP4rev1 (RFC 3501) with IDLE (RFC 2177),
written here, and SMTP served by aiosmtpd.

The IMAP side speaks the commands a client reading a folder uses: CAPABILITY, LOGIN, SELECT,
STATUS, UID SEARCH (UID sets, KEYWORD/UNKEYWORD, SEEN/UNSEEN, ALL), UID FETCH (RFC822.SIZE,
FLAGS, BODY[] / BODY.PEEK[] of a whole message, its HEADER or one numbered part), UID STORE
(+FLAGS/-FLAGS), IDLE/DONE, NOOP, LOGOUT, with literals exactly as the RFC writes them. Mail
is put in with `deliver`; a person's mail is written by `person_mail` with the
Authentication-Results header the receiving server would add. Everything the bot sends by
SMTP lands in `sent`, parsed.
"""

from __future__ import annotations

import asyncio
import email
import re
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email import policy
from email.message import EmailMessage, Message
from email.utils import format_datetime, formataddr, make_msgid
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session


@dataclass
class Stored:
    uid: int
    raw: bytes
    flags: set[str] = field(default_factory=set)
    arrived: float = field(default_factory=time.time)


@dataclass
class Folder:
    validity: int = 1
    next_uid: int = 1
    messages: list[Stored] = field(default_factory=list)


_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"|\(([^()]*)\)|(\S+)')


def _tokens(args: bytes) -> list[bytes]:
    out = []
    for quoted, listed, atom in _TOKEN.findall(args):
        if quoted:
            out.append(re.sub(rb"\\(.)", rb"\1", quoted))
        elif listed or atom == b"":
            out.append(b"(" + listed + b")" if listed or not atom else atom)
        else:
            out.append(atom)
    return out


def _in_set(uid: int, spec: str, highest: int) -> bool:
    for piece in spec.split(","):
        lo, _, hi = piece.partition(":")
        low = highest if lo == "*" else int(lo)
        high = low if not hi else (highest if hi == "*" else int(hi))
        low, high = min(low, high), max(low, high)
        if low <= uid <= high:
            return True
    return False


def section_bytes(raw: bytes, section: str) -> bytes | None:
    """BODY[section] as RFC 3501 defines it: the whole message, its header, or a numbered
    part's body as stored (still in its transfer encoding)."""
    if section == "":
        return raw
    head, sep, _ = raw.partition(b"\r\n\r\n")
    if section.upper() == "HEADER":
        return head + sep
    node: Message = email.message_from_bytes(raw, policy=policy.compat32)
    for number in section.split("."):
        if not number.isdigit():
            return None
        if node.is_multipart():
            children = node.get_payload()
            index = int(number) - 1
            if not 0 <= index < len(children):
                return None
            node = children[index]
        elif number != "1":
            return None
    payload = node.get_payload()
    if isinstance(payload, list):
        return None
    return str(payload).encode("utf-8", "surrogateescape")


class ImapEmulator:
    """One IMAP account (`user`/`password`) with folders; see the module docstring."""

    def __init__(self, *, user: str = "bot@example.test", password: str = "imap-secret", idle: bool = True) -> None:
        self.user = user
        self.password = password
        self.idle = idle
        self.folders: dict[str, Folder] = {"INBOX": Folder()}
        self.port = 0
        self.logins = 0
        self.failed_logins = 0
        self.searches = 0
        #: Every FETCH of a numbered part: (uid, section); whole-message reads are not counted.
        self.part_fetches: list[tuple[int, str]] = []
        self._server: asyncio.base_events.Server | None = None
        self._idlers: list[tuple[str, asyncio.StreamWriter]] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def inbox(self) -> Folder:
        return self.folders["INBOX"]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop_connections()
        handlers = [task for task in self._handlers if not task.done()]
        if handlers:
            await asyncio.wait(handlers, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    def drop_connections(self) -> None:
        """The server goes away under every client (a restart): their next read fails."""
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()
        self._idlers.clear()

    def deliver(self, raw: bytes, folder: str = "INBOX") -> int:
        box = self.folders[folder]
        uid = box.next_uid
        box.next_uid += 1
        box.messages.append(Stored(uid, raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")))
        for name, writer in list(self._idlers):
            if name == folder:
                writer.write(f"* {len(box.messages)} EXISTS\r\n".encode())
        return uid

    def rebuild(self, folder: str = "INBOX") -> None:
        """The server renumbers the folder (a new UIDVALIDITY); flags are kept."""
        box = self.folders[folder]
        box.validity += 1
        for number, stored in enumerate(box.messages, start=1):
            stored.uid = number
        box.next_uid = len(box.messages) + 1

    def flags_of(self, uid: int, folder: str = "INBOX") -> set[str]:
        return next(m.flags for m in self.folders[folder].messages if m.uid == uid)

    # --- the protocol ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        self._writers.add(writer)
        caps = "IMAP4rev1 AUTH=PLAIN" + (" IDLE" if self.idle else "")
        writer.write(f"* OK [CAPABILITY {caps}] emulator ready\r\n".encode())
        state: dict[str, Any] = {"authed": False, "folder": None}
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                tag, _, rest = line.rstrip(b"\r\n").partition(b" ")
                command, _, args = rest.partition(b" ")
                name = command.upper().decode(errors="replace")
                if name == "UID":
                    sub, _, args = args.partition(b" ")
                    name = "UID " + sub.upper().decode(errors="replace")
                if name == "LOGOUT":
                    writer.write(b"* BYE logging out\r\n" + tag + b" OK LOGOUT completed\r\n")
                    await writer.drain()
                    return
                await self._command(tag, name, args, state, reader, writer, caps)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            self._idlers = [(n, w) for n, w in self._idlers if w is not writer]
            writer.close()

    async def _command(
        self, tag: bytes, name: str, args: bytes, state: dict[str, Any],
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, caps: str,
    ) -> None:
        def ok(text: str = "completed") -> None:
            writer.write(tag + f" OK {name} {text}\r\n".encode())

        def no(text: str) -> None:
            writer.write(tag + f" NO {text}\r\n".encode())

        if name == "CAPABILITY":
            writer.write(f"* CAPABILITY {caps}\r\n".encode())
            return ok()
        if name == "NOOP":
            return ok()
        if name == "LOGIN":
            user, password = (t.decode() for t in _tokens(args)[:2])
            if user == self.user and password == self.password:
                state["authed"] = True
                self.logins += 1
                return ok()
            self.failed_logins += 1
            return no("[AUTHENTICATIONFAILED] Invalid credentials")
        if not state["authed"]:
            writer.write(tag + b" BAD log in first\r\n")
            return None
        if name in ("SELECT", "EXAMINE"):
            folder = _tokens(args)[0].decode()
            if folder not in self.folders:
                return no("[NONEXISTENT] no such folder")
            state["folder"] = folder
            box = self.folders[folder]
            state["known"] = len(box.messages)
            writer.write(f"* {len(box.messages)} EXISTS\r\n* 0 RECENT\r\n".encode())
            writer.write(f"* OK [UIDVALIDITY {box.validity}] UIDs valid\r\n".encode())
            writer.write(f"* OK [UIDNEXT {box.next_uid}] predicted next UID\r\n".encode())
            writer.write(b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n")
            writer.write(b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*)] keywords allowed\r\n")
            return ok("[READ-WRITE] completed")
        if name == "STATUS":
            tokens = _tokens(args)
            folder = tokens[0].decode()
            if folder not in self.folders:
                return no("[NONEXISTENT] no such folder")
            box = self.folders[folder]
            values = {"MESSAGES": len(box.messages), "UIDNEXT": box.next_uid, "UIDVALIDITY": box.validity,
                      "UNSEEN": sum(1 for m in box.messages if "\\Seen" not in m.flags), "RECENT": 0}
            asked = tokens[1].strip(b"()").decode().split()
            shown = " ".join(f"{key} {values[key]}" for key in asked if key in values)
            writer.write(f'* STATUS "{folder}" ({shown})\r\n'.encode())
            return ok()
        folder = state["folder"]
        if folder is None:
            writer.write(tag + b" BAD select a folder first\r\n")
            return None
        box = self.folders[folder]
        if name == "IDLE":
            if not self.idle:
                writer.write(tag + b" BAD no IDLE here\r\n")
                return None
            writer.write(b"+ idling\r\n")
            if len(box.messages) > state.get("known", 0):  # news since the client last looked
                writer.write(f"* {len(box.messages)} EXISTS\r\n".encode())
            state["known"] = len(box.messages)
            await writer.drain()
            self._idlers.append((folder, writer))
            done = await reader.readline()
            self._idlers = [(n, w) for n, w in self._idlers if w is not writer]
            if done.strip().upper() != b"DONE":
                writer.write(tag + b" BAD expected DONE\r\n")
                return None
            return ok("terminated")
        if name == "UID SEARCH":
            self.searches += 1
            state["known"] = len(box.messages)
            found = self._search(box, args)
            writer.write(("* SEARCH" + "".join(f" {uid}" for uid in found) + "\r\n").encode())
            return ok()
        if name == "UID FETCH":
            spec, _, items = args.partition(b" ")
            highest = box.messages[-1].uid if box.messages else 0
            for seq, stored in enumerate(box.messages, start=1):
                if _in_set(stored.uid, spec.decode(), highest):
                    self._fetch(writer, seq, stored, items.decode())
            return ok()
        if name == "UID STORE":
            spec, how, flags = (args.split(b" ", 2) + [b"", b""])[:3]
            names = set(flags.strip(b"()").decode().split())
            highest = box.messages[-1].uid if box.messages else 0
            for seq, stored in enumerate(box.messages, start=1):
                if _in_set(stored.uid, spec.decode(), highest):
                    if how.upper().startswith(b"-"):
                        stored.flags -= names
                    else:
                        stored.flags |= names
                    writer.write(f"* {seq} FETCH (UID {stored.uid} FLAGS ({' '.join(sorted(stored.flags))}))\r\n".encode())
            return ok()
        writer.write(tag + f" BAD unknown command {name}\r\n".encode())
        return None

    def _search(self, box: Folder, args: bytes) -> list[int]:
        tokens = [t.decode() for t in _tokens(args)]
        if tokens[:1] == ["CHARSET"]:
            tokens = tokens[2:]
        highest = box.messages[-1].uid if box.messages else 0
        found = []
        for stored in box.messages:
            keep, index = True, 0
            while index < len(tokens):
                key = tokens[index].upper()
                if key == "UID":
                    keep &= _in_set(stored.uid, tokens[index + 1], highest)
                    index += 1
                elif key == "UNKEYWORD":
                    keep &= tokens[index + 1] not in stored.flags
                    index += 1
                elif key == "KEYWORD":
                    keep &= tokens[index + 1] in stored.flags
                    index += 1
                elif key == "UNSEEN":
                    keep &= "\\Seen" not in stored.flags
                elif key == "SEEN":
                    keep &= "\\Seen" in stored.flags
                index += 1
            if keep:
                found.append(stored.uid)
        return found

    def _fetch(self, writer: asyncio.StreamWriter, seq: int, stored: Stored, items: str) -> None:
        parts = [f"UID {stored.uid}"]
        literal: bytes | None = None
        if "FLAGS" in items.upper().replace("RFC822.SIZE", ""):
            parts.append(f"FLAGS ({' '.join(sorted(stored.flags))})")
        if "RFC822.SIZE" in items.upper():
            parts.append(f"RFC822.SIZE {len(stored.raw)}")
        body = re.search(r"BODY(\.PEEK)?\[([^\]]*)\]", items, re.IGNORECASE)
        if body is not None:
            section = body.group(2)
            literal = section_bytes(stored.raw, section)
            if section and section.upper() != "HEADER":
                self.part_fetches.append((stored.uid, section))
            if body.group(1) is None:
                stored.flags.add("\\Seen")
            literal = literal if literal is not None else b""
            parts.append(f"BODY[{section}] {{{len(literal)}}}")
        head = f"* {seq} FETCH ({' '.join(parts)}"
        if literal is None:
            writer.write((head + ")\r\n").encode())
        else:
            writer.write(head.encode() + b"\r\n" + literal + b")\r\n")


class _Accounts:
    """aiosmtpd's authenticator: one login and password."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password

    def __call__(self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any) -> AuthResult:
        ok = isinstance(auth_data, LoginPassword) and (
            auth_data.login.decode() == self.user and auth_data.password.decode() == self.password
        )
        return AuthResult(success=ok, handled=False)


class SmtpEmulator:
    """aiosmtpd on 127.0.0.1 requiring a login; every accepted mail is kept, parsed, in `sent`.
    `refuse` makes it turn recipients down with a 550, `fail_data` the next DATA with a code."""

    def __init__(self, *, user: str = "bot@example.test", password: str = "smtp-secret") -> None:
        self.user, self.password = user, password
        self.port = 0
        self.sent: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.refuse: set[str] = set()
        self.fail_data: list[str] = []
        self._server: asyncio.base_events.Server | None = None

    async def handle_RCPT(self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]) -> str:  # noqa: N802
        if address.lower() in self.refuse:
            return "550 5.1.1 no such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        if self.fail_data:
            return self.fail_data.pop(0)
        content = envelope.original_content or envelope.content
        raw = content if isinstance(content, bytes) else str(content).encode()
        self.sent.append(email.message_from_bytes(raw, policy=policy.default))  # type: ignore[arg-type]
        self.envelopes.append((str(envelope.mail_from), list(envelope.rcpt_tos)))
        return "250 OK queued"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        authenticator = _Accounts(self.user, self.password)

        def session() -> SMTP:
            # Logging in without TLS is what this loopback server is for; aiosmtpd warns of it.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                return SMTP(self, authenticator=authenticator, auth_require_tls=False, auth_required=True,
                            hostname="smtp.emulator.test")

        self._server = await loop.create_server(session, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def texts_to(self, address: str) -> list[str]:
        return [text_of(m) for m in self.sent if address.lower() in str(m["To"]).lower()]

    def by_id(self, message_id: str) -> EmailMessage | None:
        return next((m for m in self.sent if str(m["Message-ID"]).strip().strip("<>") == message_id), None)


def text_of(msg: EmailMessage) -> str:
    part = msg.get_body(preferencelist=("plain",))
    return part.get_content().replace("\r\n", "\n").rstrip("\n") if part is not None else ""


class MailEmulator:
    """Both servers, for one bot address, and the people who write to it."""

    def __init__(self, address: str = "bot@example.test", *, idle: bool = True) -> None:
        self.address = address
        self.imap = ImapEmulator(user=address, idle=idle)
        self.smtp = SmtpEmulator(user=address)

    async def start(self) -> None:
        await self.imap.start()
        await self.smtp.start()

    async def stop(self) -> None:
        await self.imap.stop()
        await self.smtp.stop()

    def config(self, **overrides: Any) -> dict[str, Any]:
        """An EmailConfig mapping pointing the adapter at these servers."""
        return {
            "address": self.address,
            "imap": {"host": "127.0.0.1", "port": self.imap.port, "user": self.imap.user,
                     "password": self.imap.password, "ssl": False},
            "smtp": {"host": "127.0.0.1", "port": self.smtp.port, "user": self.smtp.user,
                     "password": self.smtp.password, "starttls": False},
            "poll_seconds": 0.2,
            **overrides,
        }

    def person_mail(
        self,
        sender: str,
        text: str = "",
        *,
        subject: str = "Hello",
        name: str = "",
        in_reply_to: str | None = None,
        references: tuple[str, ...] = (),
        html: str | None = None,
        files: tuple[tuple[bytes, str, str], ...] = (),
        declared_sizes: dict[str, int] | None = None,
        auth: str | None = "dmarc=pass",
        headers: dict[str, str] | None = None,
        message_id: str | None = None,
    ) -> tuple[bytes, str]:
        """A mail as it reaches the bot's mailbox: with the receiving server's
        Authentication-Results (`auth`, e.g. "spf=pass smtp.mailfrom=example.com"; None: no
        header). Returns the raw bytes and its bare Message-ID."""
        msg = EmailMessage()
        domain = sender.rpartition("@")[2]
        mid = message_id or make_msgid(domain=domain).strip("<>")
        if auth is not None:
            msg["Authentication-Results"] = f"mx.example.test; {auth}"
        msg["From"] = formataddr((name, sender))
        msg["To"] = self.address
        msg["Subject"] = subject
        msg["Message-ID"] = f"<{mid}>"
        msg["Date"] = format_datetime(datetime.now(timezone.utc))
        if in_reply_to:
            msg["In-Reply-To"] = f"<{in_reply_to}>"
        if references:
            msg["References"] = " ".join(f"<{r}>" for r in references)
        for key, value in (headers or {}).items():
            msg[key] = value
        if html is not None:
            msg.set_content(html, subtype="html")
        else:
            msg.set_content(text)
        for data, filename, mime in files:
            maintype, _, subtype = mime.partition("/")
            msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
            if declared_sizes and filename in declared_sizes:
                attachment = msg.get_payload()[-1]
                attachment.set_param("size", str(declared_sizes[filename]), header="Content-Disposition")
        return msg.as_bytes(policy=policy.SMTP), mid

    def person_writes(self, sender: str, text: str = "", **kwargs: Any) -> tuple[int, str]:
        """Deliver a person's mail into the bot's inbox; its UID and Message-ID."""
        raw, mid = self.person_mail(sender, text, **kwargs)
        return self.imap.deliver(raw), mid

    def replies_to(self, address: str) -> list[EmailMessage]:
        return [m for m in self.smtp.sent if address.lower() in str(m["To"]).lower()]
