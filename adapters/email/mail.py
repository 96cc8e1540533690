"""Mail as botweave reads and writes it: pure functions, no I/O.

A received message is read into `Mail` (who sent it, which thread it belongs to, its text and
its files); `authenticated` decides whether the From can be believed; `compose` writes a
reply that mail clients thread under the message it answers.
"""

from __future__ import annotations

import email
import re
import uuid
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.utils import formataddr, parseaddr
from html.parser import HTMLParser

#: The Message-ID of every header the thread chain is read from, without its angle brackets.
_ID = re.compile(r"<([^<>\s]+)>")
#: How many earlier ids a reply's References keep (RFC 5322 asks for the chain; clients cut it).
MAX_REFERENCES = 20
_REPLY_PREFIX = re.compile(r"^\s*((re|aw|sv|antw)\s*:\s*)+", re.IGNORECASE)
_ATTRIBUTION = re.compile(r"^(on\s.+wrote:|-+\s*original message\s*-+)\s*$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Part:
    """A file in a mail: its IMAP section number (how its bytes are fetched alone), name, type
    and size (as declared by its Content-Disposition, else as counted)."""

    section: str
    filename: str
    mime: str
    size: int
    encoding: str = "7bit"


@dataclass(frozen=True, slots=True)
class Mail:
    message_id: str
    sender: str  # the From address, lower-cased
    sender_name: str
    subject: str
    in_reply_to: str | None
    references: tuple[str, ...]
    text: str
    parts: tuple[Part, ...] = ()
    auth_results: tuple[str, ...] = field(default=(), repr=False)
    #: Sent by a program (an auto-reply, a list, a bounce): answering it could start a loop.
    automatic: bool = False

    @property
    def root(self) -> str:
        """The thread this mail belongs to: the first message of its References chain, else the
        message it replies to, else itself. Every reply in a thread names the same root."""
        if self.references:
            return self.references[0]
        return self.in_reply_to or self.message_id

    @property
    def chain(self) -> tuple[str, ...]:
        """References for a reply to this mail: its own chain, then itself."""
        known = self.references or ((self.in_reply_to,) if self.in_reply_to else ())
        return (*known, self.message_id)[-MAX_REFERENCES:]


def ids(value: object) -> tuple[str, ...]:
    """The message ids in a header, bare (no angle brackets), in order."""
    return tuple(_ID.findall(str(value or "")))


def bare_subject(subject: str) -> str:
    """A subject without the `Re:` prefixes clients stack up."""
    return _REPLY_PREFIX.sub("", subject).strip()


def parse(raw: bytes, *, fallback_id: str) -> Mail:
    """Read a received message. `fallback_id` names a mail that came without a Message-ID."""
    msg = email.message_from_bytes(raw, policy=policy.default)
    name, address = parseaddr(str(msg.get("From", "")))
    message_id = next(iter(ids(msg.get("Message-ID"))), fallback_id)
    in_reply_to = next(iter(ids(msg.get("In-Reply-To"))), None)
    return Mail(
        message_id=message_id,
        sender=address.strip().lower(),
        sender_name=name.strip(),
        subject=str(msg.get("Subject", "") or "").strip(),
        in_reply_to=in_reply_to,
        references=ids(msg.get("References")),
        text=strip_quoted(body_text(msg)),
        parts=tuple(files_of(msg)),
        auth_results=tuple(str(h) for h in msg.get_all("Authentication-Results", [])),
        automatic=_automatic(msg),
    )


def _automatic(msg: Message) -> bool:
    """RFC 3834's Auto-Submitted, a list's or a bulk sender's Precedence, or a bounce."""
    auto = str(msg.get("Auto-Submitted", "no") or "no").strip().lower()
    precedence = str(msg.get("Precedence", "") or "").strip().lower()
    return auto != "no" or precedence in ("bulk", "junk", "list") or msg.get_content_type() == "multipart/report"


def body_text(msg: Message) -> str:
    """The mail's text: its text/plain part, else its HTML read as text."""
    plain = html = None
    for part in msg.walk():
        if part.is_multipart() or _is_file(part):
            continue
        ctype = part.get_content_type()
        if ctype == "text/plain" and plain is None:
            plain = _decoded(part)
        elif ctype == "text/html" and html is None:
            html = _decoded(part)
    if plain is not None:
        return plain.replace("\r\n", "\n").strip()
    return html_to_text(html).strip() if html is not None else ""


def _decoded(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:  # a charset Python does not know
        return payload.decode("utf-8", errors="replace")


def _is_file(part: Message) -> bool:
    disposition = part.get_content_disposition()
    return disposition == "attachment" or (disposition == "inline" and part.get_filename() is not None) or (
        part.get_filename() is not None and not part.get_content_type().startswith("text/")
    )


def files_of(msg: Message) -> list[Part]:
    """The files in a mail with their IMAP section numbers (RFC 3501: the parts of a multipart
    are numbered from 1, nested ones with a dot; a single-part mail's body is section 1)."""
    found: list[Part] = []

    def walk(node: Message, section: str) -> None:
        if node.is_multipart():
            children = node.get_payload()
            for index, child in enumerate(children if isinstance(children, list) else [], start=1):
                walk(child, f"{section}.{index}" if section else str(index))
            return
        if not _is_file(node):
            return
        payload = node.get_payload(decode=True)
        counted = len(payload) if isinstance(payload, bytes) else 0
        declared = node.get_param("size", header="content-disposition")
        size = int(declared) if isinstance(declared, str) and declared.isdigit() else counted
        encoding = str(node.get("Content-Transfer-Encoding", "7bit")).strip().lower()
        found.append(Part(section or "1", node.get_filename() or "attachment", node.get_content_type(), size, encoding))

    walk(msg, "")
    return found


class _Text(HTMLParser):
    """HTML to readable text: tags dropped, entities decoded, blocks on lines of their own."""

    BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre"})
    SKIPPED = frozenset({"script", "style", "head", "title"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIPPED:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIPPED:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.out.append(data)


def html_to_text(html: str) -> str:
    reader = _Text()
    reader.feed(html)
    reader.close()
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(reader.out).split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def strip_quoted(text: str) -> str:
    """The new words of a reply: the quoted earlier mail at its end (`> ` lines and the
    "On … wrote:" line before them) is dropped; the thread's history already holds it."""
    lines = text.split("\n")
    end = len(lines)
    while end and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith(">")):
        end -= 1
    quoted = any(line.lstrip().startswith(">") for line in lines[end:])
    if quoted and end and _ATTRIBUTION.match(lines[end - 1].strip()):
        end -= 1
    return "\n".join(lines[:end]).strip() if quoted else text.strip()


def authenticated(mail: Mail, *, authserv_id: str | None) -> bool:
    """Whether the receiving server vouched for the From: DMARC pass, or DKIM or SPF pass for
    the From's domain, in the topmost Authentication-Results header (the one the bot's own
    server added; a header further down may come from the sender). With `authserv_id`, only a
    header written by that server counts."""
    domain = mail.sender.rpartition("@")[2]
    for header in mail.auth_results[:1]:
        server, _, results = header.partition(";")
        if authserv_id is not None and server.strip().split()[0:1] != [authserv_id]:
            return False
        found = _results(results)
        if found.get("dmarc") == "pass":
            return True
        if found.get("dkim") == "pass" and _aligned(found.get("header.d") or found.get("header.i"), domain):
            return True
        if found.get("spf") == "pass" and _aligned(found.get("smtp.mailfrom"), domain):
            return True
    return False


def _results(text: str) -> dict[str, str]:
    """`dkim=pass header.d=example.com; spf=fail …` as {method: result, property: value}; the
    first result of each method counts."""
    found: dict[str, str] = {}
    for clause in text.split(";"):
        for token in re.sub(r"\([^)]*\)", " ", clause).split():
            key, sep, value = token.partition("=")
            if sep:
                found.setdefault(key.lower(), value.strip().strip('"').lower())
    return found


def _aligned(value: str | None, domain: str) -> bool:
    if not value or not domain:
        return False
    vouched = value.rpartition("@")[2]
    return vouched == domain or domain.endswith("." + vouched)


def allowed(sender: str, allowed_senders: list[str]) -> bool:
    """Whether `sender` is on the list (an address, or `@domain` for a whole domain); an empty
    list allows everyone."""
    if not allowed_senders:
        return True
    domain = "@" + sender.rpartition("@")[2]
    entries = {entry.strip().lower() for entry in allowed_senders}
    return sender in entries or domain in entries


def new_message_id(address: str) -> str:
    """A Message-ID in the bot's own domain, bare."""
    domain = address.rpartition("@")[2] or "botweave.invalid"
    return f"{uuid.uuid4().hex}@{domain}"


def compose(
    *,
    sender: str,
    sender_name: str,
    to: str,
    text: str,
    subject: str,
    message_id: str,
    in_reply_to: str | None = None,
    references: tuple[str, ...] = (),
    files: tuple[tuple[bytes, str, str], ...] = (),
) -> EmailMessage:
    """A plain-text mail; as a reply it carries `Re: subject`, In-Reply-To and References, so
    every client threads it under the mail it answers. `files` are (bytes, filename, mime)."""
    msg = EmailMessage()
    msg["From"] = formataddr((sender_name, sender))
    msg["To"] = to
    msg["Subject"] = subject
    msg["Message-ID"] = f"<{message_id}>"
    msg["Date"] = email.utils.formatdate(localtime=False)
    if in_reply_to:
        msg["In-Reply-To"] = f"<{in_reply_to}>"
    if references:
        msg["References"] = " ".join(f"<{ref}>" for ref in references[-MAX_REFERENCES:])
    msg["Auto-Submitted"] = "auto-replied" if in_reply_to else "auto-generated"
    msg.set_content(text)
    for data, filename, mime in files:
        maintype, _, subtype = mime.partition("/")
        msg.add_attachment(data, maintype=maintype or "application", subtype=subtype or "octet-stream",
                           filename=filename)
    return msg


def reply_subject(subject: str) -> str:
    bare = bare_subject(subject)
    return f"Re: {bare}" if bare else "Re: your message"


def first_line_subject(text: str) -> str:
    """A subject for a mail that starts a thread (a schedule's post): its first line, cut."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = re.sub(r"[*_`#>]+", "", line).strip()
    return line if len(line) <= 70 else line[:69].rstrip() + "…"

