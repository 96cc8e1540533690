"""What every platform adapter provides to the runtime, and the rules all platforms share.

An adapter owns one platform connection and is composed of two parts. Its inbound part turns
SDK events into `BotMessage` / `PlatformEvent` and hands them to `dispatch`, which passes them
to the receiver the runtime bound (its `Submit`); that returns quickly (turns run in the
background), so platforms that need a fast acknowledgement get one. Its outbound part (`Outbound`) makes the
platform's calls.

The outbound actions follow python-telegram-bot's `BaseRequest`: the public methods here
(`send`, `edit`, `delete`, `react`, `send_as`, `send_direct`, `send_file`) hold every rule once
— nothing is routable before `start`, empty text is never posted, a missing capability is
`unsupported`, an agent the platform cannot post as gets its name in front of the text, a
caption longer than the platform allows continues in messages after the file — then call the
platform's primitive, which only makes the request, and turn whatever it raises into a
`MessageActionResult` through that platform's one `classify` hook. So every outcome is a typed
result, and one failed action never stops a turn. Being the one path, it is also where every
action is counted (`botweave_outbound_total`).

Files people send are read the same way round: `download` holds the size rule (the size the
platform declares is checked before a byte is fetched, and the bytes are counted again as they
arrive, so a file that lies about its size is cut off at the limit and never held whole) and
the platform's `read_file` only streams the bytes through its own API with its own
credentials. The URLs involved may carry a token; they stay inside the adapter.

Buttons follow the same split. `send(..., buttons=...)` and `edit(..., buttons=...)` hold the
rules (a platform without buttons is `unsupported`) and the platform's `send_buttons` /
`edit_buttons` draw them its own way. A press travels the other way: the inbound part reads it
as a `button_pressed` event and hands it to `pressed` together with the platform's way of
acknowledging it; `pressed` asks the runtime what to tell the presser (within
`PRESS_ANSWER_BUDGET_S`, so the platform's deadline holds however slow the answer is), has the
press acknowledged with that answer, then dispatches the event like any other.

For operators, each platform also answers two questions: is it connected right now
(`readiness`, behind `/readyz`), and do its credentials and settings work (`diagnose`, behind
`botweave doctor`, which makes one real call without starting to receive).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from botweave.config import PlatformConfig
from botweave.events import ConversationEvents
from botweave.metrics import OUTBOUND
from botweave.replies import chunk_text, measure
from botweave.store.base import Store
from botweave.tasks import register_secret
from botweave.types import (
    ActionStatus,
    AgentIdentity,
    BotMessage,
    BotUser,
    Button,
    MessageActionResult,
    OutboundFile,
    PlatformCapabilities,
    PlatformEvent,
    PressAnswer,
)

#: The receiver's `submit` (the App's): where an adapter hands each item it receives.
Submit = Callable[[BotMessage | PlatformEvent], Awaitable[None]]
#: The runtime's reading of a press: the event as the runtime understands it (its action and
#: value looked up) and what the presser is told.
PressHandler = Callable[[PlatformEvent], Awaitable[tuple[PlatformEvent, PressAnswer]]]
#: The runtime's access rules asked about a message a person would send (its sender and chat),
#: before the bot goes somewhere on that person's word alone (a Matrix invitation): whether
#: the bot would answer it.
Admits = Callable[[BotMessage], Awaitable[bool]]
#: A platform's way of acknowledging one press, with the answer for the presser.
Acknowledge = Callable[[PressAnswer], Awaitable[None]]
#: How long a press waits for the runtime's answer before it is acknowledged without one:
#: Discord and Slack want the acknowledgement within three seconds of the press.
PRESS_ANSWER_BUDGET_S = 1.5
#: How a failed platform call reads: its status and a short reason in the platform's words.
Outcome = tuple[ActionStatus, str]

#: How a send whose outcome is unknown (the process died, or the answer never came back) is
#: settled without showing the message twice:
#:   "key"    - the platform drops a repeat that carries the same key (`send_keyed`);
#:   "lookup" - a post carries its key and can be found in the conversation (`find_sent`);
#:   "none"   - neither: the only way not to lose it is to send it again.
Idempotency = Literal["none", "key", "lookup"]

log = logging.getLogger(__name__)


class PlatformRejected(RuntimeError):
    """The platform refused to let us in for a reason that trying again cannot fix (a
    rejected token, a missing permission); the message says what to change."""


@dataclass(frozen=True, slots=True)
class Check:
    """One line of `botweave doctor`: what was checked, whether it passed, what was found,
    and (when it did not pass) what to change. `skipped` checks count as neither."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    skipped: bool = False


class ActionError(Exception):
    """An outcome a primitive reports itself rather than through an SDK error: an id the
    platform cannot read, a reaction it does not offer, a post that may have been delivered."""

    def __init__(self, status: ActionStatus, detail: str) -> None:
        super().__init__(detail)
        self.status: ActionStatus = status
        self.detail = detail


class FileTooLarge(Exception):
    """A file is over the size limit: as declared (`size` is then its size), or `counted`
    while it arrived (`size` is then how far the count got before reading stopped)."""

    def __init__(self, size: int | None, limit: int, detail: str = "", *, counted: bool = False) -> None:
        super().__init__(detail or f"{size} bytes, over the limit of {limit}")
        self.size = size
        self.limit = limit
        self.counted = counted


class FileUnavailable(Exception):
    """A file could not be fetched; the message says why in words safe to log and show (it
    never contains the URL, which may carry a token)."""


class ByteLimit:
    """The size rule of one download, handed to the platform's `read_file` so that a size
    the platform declares on the way (getFile's `file_size`, a Content-Length) is checked
    before the bytes are fetched."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def declared(self, size: object) -> None:
        """Refuse a file whose declared size is over the limit; an unknown size passes (the
        bytes are counted anyway)."""
        if isinstance(size, int) and not isinstance(size, bool) and size > self.max_bytes:
            raise FileTooLarge(size, self.max_bytes)


class NoIdentity(Exception):
    """The platform cannot post under the agent's own name in this chat, and nothing was
    posted; the turn goes out with the name in front of the text instead."""


class Outbound(ABC):
    """One platform's outbound calls.

    Each primitive only makes its request: it returns on success and raises otherwise. The
    adapter applies the shared rules around it and reads any exception through `classify`.
    A platform overrides what it can do; the primitive of a capability it declares missing is
    never called.
    """

    @abstractmethod
    async def send(self, chat_id: str, text: str, *, thread_id: str | None, reply_to: str | None) -> str | None:
        """Post one message (already within the length limit); its platform id."""

    async def edit(self, chat_id: str, message_id: str, text: str, *, thread_id: str | None) -> None:
        raise ActionError("unsupported", "edit: not supported")

    async def send_buttons(
        self, chat_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """Post one message with buttons under it. Each button's `action_id` goes on the wire as
        it is (the runtime keeps ids short enough for every platform) and comes back with its
        press."""
        raise ActionError("unsupported", "buttons: not supported")

    async def edit_buttons(
        self, chat_id: str, message_id: str, text: str, buttons: Sequence[Button], *, thread_id: str | None
    ) -> None:
        """Replace a message's text and its buttons; no buttons removes them."""
        raise ActionError("unsupported", "buttons: not supported")

    async def delete(self, chat_id: str, message_id: str) -> None:
        raise ActionError("unsupported", "delete: not supported")

    async def send_keyed(
        self, chat_id: str, text: str, *, key: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """`send` tagged with a key the platform can recognise (only "key" and "lookup"
        platforms use it)."""
        return await self.send(chat_id, text, thread_id=thread_id, reply_to=reply_to)

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None, since: float) -> str | None:
        """The message posted under `key`, for "lookup" platforms; the rest cannot tell."""
        return None

    async def react(self, chat_id: str, message_id: str, emoji: str) -> None:
        raise ActionError("unsupported", "react: not supported")

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None) -> str:
        """Open a thread named `name` (on `message_id` where the platform starts threads on a
        message); the id later posts into the thread use."""
        raise ActionError("unsupported", "create_thread: not supported")

    async def send_as(self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None) -> str | None:
        """Post under the agent's own name and picture; raise `NoIdentity` where that is impossible."""
        raise NoIdentity

    async def send_file(
        self, chat_id: str, file: OutboundFile, *, caption: str, thread_id: str | None, reply_to: str | None
    ) -> str | None:
        """Post one file with a caption already within the platform's caption limit."""
        raise ActionError("unsupported", "send_file: not supported")

    async def read_file(self, ref: Mapping[str, Any], limit: ByteLimit) -> AsyncGenerator[bytes, None]:
        """Stream the bytes of an inbound attachment (one of `BotMessage.attachments`) through
        the platform's API with the bot's credentials; report a size the platform declares on
        the way to `limit`. The caller counts the bytes and stops reading at the limit."""
        raise ActionError("unsupported", "this platform has no files to read")
        yield b""  # a generator, like the platforms' own

    async def direct_chat(self, user_id: str) -> str:
        """The chat that reaches this user privately; on most platforms the user id itself."""
        return user_id

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        """The user whose private chat with the bot `chat_id` is, asked of the platform where
        its ids do not tell; None for a group or a channel, and wherever the platform cannot
        tell (which then counts as not private)."""
        return None

    async def typing(self, chat_id: str, *, thread_id: str | None) -> None:
        """Show the typing indicator once."""

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        """A reply is complete (its streamed edits included)."""

    def retryable(self, exc: Exception) -> bool:
        """Whether another attempt may succeed: no answer came back, or the platform failed
        on its side. A refusal the platform spelled out (blocked, forbidden, bad request)
        would only be refused again."""
        return not isinstance(exc, ActionError)

    @abstractmethod
    def classify(self, exc: Exception, action: str) -> Outcome:
        """Read a failed call. `action` is `send` for anything that posts a new message (such a
        post may have been delivered: only a keyed send through delivery is ever repeated),
        else `edit`, `delete` or `react`."""


class Adapter(ABC):
    """One platform connection. A platform declares its `capabilities` and the event kinds it
    `emits`, logs in on `start` (setting `self_user` and its `outbound` part), and has its
    inbound part hand what it reads to `dispatch`; everything else is shared."""

    platform: ClassVar[str]
    capabilities: ClassVar[PlatformCapabilities]
    #: The PlatformEvent kinds this adapter can deliver; a kind not listed is never emitted.
    emits: frozenset[str] = frozenset()
    #: How often the runtime renews the typing indicator while a turn runs.
    typing_interval_s: ClassVar[float] = 4.0
    #: What the platform offers to settle a send of unknown outcome (see `Idempotency`).
    idempotency: ClassVar[Idempotency] = "none"
    #: A platform whose input belongs to this process (the console reads its own terminal):
    #: with a shared store it is still received and answered here, never handed to the shared
    #: stream (another worker would print the answer on its own terminal) nor held by a
    #: leader lock (another process's console would keep this one from reading at all).
    local: ClassVar[bool] = False
    #: A platform that shows its messages through conversation events itself (the web: its
    #: people read the events): delivery then does not publish what it posts there again.
    events_native: ClassVar[bool] = False

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self.self_user: BotUser | None = None  # known once start() has logged in
        #: The platform's calls; set by start() once the platform accepted the bot, cleared by stop().
        self.outbound: Outbound | None = None
        #: Set when the connection ended for good after start (a refusal, a conflict that
        #: retrying cannot fix): the process should stop and say so.
        self.failure: str | None = None
        self._submit: Submit | None = None
        self._presses: PressHandler | None = None
        #: The conversation events of the runtime this adapter is bound to, when the gateway is
        #: configured (an `events_native` platform shows its messages through them).
        self.events: ConversationEvents | None = None
        #: The runtime's store, shared by every process of a deployment: where a platform keeps
        #: what its API does not (how far a mailbox was read, a thread's subject).
        self.store: Store | None = None
        #: The runtime's access rules (see `Admits`); None outside a runtime, where nobody is
        #: let in on their word alone.
        self.admits: Admits | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    @abstractmethod
    async def start(self, *, inbound: bool = True) -> None:
        """Log in and get ready to send; with `inbound`, also start receiving. A worker that
        only answers items from the shared stream starts with `inbound=False`."""

    @abstractmethod
    async def stop(self) -> None: ...

    @property
    def mode(self) -> str:
        """How this platform receives (polling, webhook, socket, gateway...), for the log line
        that says it connected."""
        return str(getattr(self.config, "mode", "") or "")

    async def readiness(self) -> str | None:
        """Why this platform cannot serve right now, or None when it can. The base knows only
        whether it is started; a platform that holds a connection says whether it is up (a
        socket connected, a poll answered lately). Must answer quickly and never raise."""
        if self.failure:
            return self.failure
        return None if self.outbound is not None else "not started"

    async def diagnose(self) -> list[Check]:
        """Check the credentials with one real call (without starting to receive) and the
        settings that only fail at run time (webhook URLs, say). Each problem is a failed
        `Check` whose `fix` names the setting; nothing raises."""
        return [Check(self.platform, True, "nothing to check")]

    def secret(self, field: str) -> str:
        """A credential of this platform's bot.yaml section as text; an empty one is an error
        that names the setting (never a value)."""
        value = getattr(self.config, field, None)
        text = value.get_secret_value().strip() if value is not None else ""
        if not text:
            raise ValueError(f"platforms.{self.platform}.{field} is not set")
        register_secret(text)  # masked in every failure line from now on
        return str(text)

    def home_chat(self) -> str | None:
        """The chat that the `<platform>` target resolves to, if configured."""
        return getattr(self.config, "home_chat", None) or None

    def split_target(self, place: str) -> tuple[str, str | None]:
        """The `<chat>[:<thread>]` part of a target as (chat, thread). A platform whose chat ids
        hold colons themselves (Matrix: `!room:example.org`, Teams: `19:…@thread.tacv2`) says where its chat id
        ends."""
        chat, _, thread = place.partition(":")
        return chat, thread or None

    def direct_user(self, chat_id: str) -> str | None:
        """The person whose direct chat `chat_id` is, where the platform's ids say so (None: a
        group or a channel, or ids that do not tell). A post to such a chat named by its id
        (a target, a welcome) belongs to that person's conversation, as their messages do."""
        return None

    # --- inbound -----------------------------------------------------------------------------

    def bind(
        self,
        submit: Submit,
        presses: PressHandler | None = None,
        *,
        events: ConversationEvents | None = None,
        store: Store | None = None,
        admits: Admits | None = None,
    ) -> None:
        self._submit = submit
        self._presses = presses
        if events is not None:  # bound again by someone who taps the receiver: the events stay
            self.events = events
        if store is not None:
            self.store = store
        if admits is not None:
            self.admits = admits

    async def pressed(self, event: PlatformEvent, acknowledge: Acknowledge) -> bool:
        """A button press: the runtime's answer for the presser (or none, if it takes longer
        than `PRESS_ANSWER_BUDGET_S`), the press acknowledged with it, then the event
        dispatched. The acknowledgement comes first because the platform's deadline is short
        and the runtime already recorded what the press decided while answering."""
        answer = PressAnswer()
        handler = self._presses
        if handler is not None:
            try:
                event, answer = await asyncio.wait_for(handler(event), PRESS_ANSWER_BUDGET_S)
            except asyncio.TimeoutError:
                log.warning("%s: no answer for a button press within %.1fs; acknowledged without one",
                            self.platform, PRESS_ANSWER_BUDGET_S)
            except Exception:  # boundary: the runtime's answer to a press; the press is acknowledged and dispatched anyway
                log.exception("%s: answering a button press failed; acknowledged without an answer", self.platform)
        try:
            await acknowledge(answer)
        except Exception as exc:  # boundary: outbound, the platform SDK acknowledging a press
            log.warning("%s: acknowledging a button press failed: %s: %s", self.platform, type(exc).__name__, exc)
        return await self.dispatch(event)

    def is_self(self, user_id: object) -> bool:
        """Whether `user_id` is this bot's own user: most platforms show a bot its own posts,
        and those must never start a turn."""
        me = self.self_user
        return me is not None and user_id is not None and str(user_id) == me.user_id

    async def dispatch(self, item: BotMessage | PlatformEvent) -> bool:
        """Hand an inbound item to the runtime; a failure there never kills the connection.
        False when the runtime did not take it, so a platform that can redeliver (a webhook
        answered with an error) is not told the item arrived. An event of a kind this adapter
        does not declare is dropped here, so nothing undeclared ever reaches a hook."""
        if isinstance(item, PlatformEvent) and item.kind not in self.emits:
            log.debug("%s: %s not emitted by this adapter; dropped", self.platform, item.kind)
            return True
        if self._submit is None:
            log.warning("%s: inbound item dropped, adapter not bound to a runtime", self.platform)
            return False
        try:
            await self._submit(item)
        except Exception:  # boundary: inbound, the hand-over to the runtime; a failure never kills the connection
            log.exception("%s: runtime failed to accept an inbound item", self.platform)
            return False
        return True

    # --- outbound ----------------------------------------------------------------------------

    async def send(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        reply_to: str | None = None,
        buttons: Sequence[Button] = (),
    ) -> MessageActionResult:
        """Post one message (already within the length limit), with `buttons` under it when
        given; `message_id` is set on ok."""
        if buttons:
            return await self._perform(
                "send",
                chat_id,
                lambda out: out.send_buttons(chat_id, text, buttons, thread_id=thread_id, reply_to=reply_to),
                text=text,
                capable=self.capabilities.buttons,
            )
        return await self._perform(
            "send", chat_id, lambda out: out.send(chat_id, text, thread_id=thread_id, reply_to=reply_to), text=text
        )

    async def send_keyed(
        self,
        chat_id: str,
        text: str,
        *,
        key: str,
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> MessageActionResult:
        """`send`, tagged with `key`: the same chunk of the same reply carries the same key in
        every attempt, in every process, so a platform with `idempotency` "key" or "lookup"
        can tell a repeat (see docs/delivery.md)."""
        return await self._perform(
            "send",
            chat_id,
            lambda out: out.send_keyed(chat_id, text, key=key, thread_id=thread_id, reply_to=reply_to),
            text=text,
        )

    async def find_sent(self, chat_id: str, key: str, *, thread_id: str | None = None, since: float) -> str | None:
        """The id of the message posted earlier under `key` (by `send_keyed`, no earlier than
        `since`, a Unix time), or None when the conversation has no such message. Raises when
        the platform cannot be asked (not started, or the lookup failed): the caller must then
        not assume the message is missing."""
        out = self.outbound
        if out is None:
            raise RuntimeError(f"find_sent: the {self.platform} adapter is not started")
        return await out.find_sent(chat_id, key, thread_id=thread_id, since=since)

    async def edit(
        self,
        chat_id: str,
        message_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        buttons: Sequence[Button] | None = None,
    ) -> MessageActionResult:
        """Replace a message's text; with `buttons` (an empty sequence too) its buttons are
        replaced as well, otherwise the platform's own rule for them applies."""
        if buttons is not None:
            return await self._perform(
                "edit",
                chat_id,
                lambda out: out.edit_buttons(chat_id, message_id, text, buttons, thread_id=thread_id),
                text=text,
                message_id=message_id,
                capable=self.capabilities.can_edit and self.capabilities.buttons,
            )
        return await self._perform(
            "edit",
            chat_id,
            lambda out: out.edit(chat_id, message_id, text, thread_id=thread_id),
            text=text,
            message_id=message_id,
            capable=self.capabilities.can_edit,
        )

    async def delete(self, chat_id: str, message_id: str) -> MessageActionResult:
        return await self._perform(
            "delete",
            chat_id,
            lambda out: out.delete(chat_id, message_id),
            message_id=message_id,
            capable=self.capabilities.can_delete,
        )

    async def react(self, chat_id: str, message_id: str, emoji: str) -> MessageActionResult:
        return await self._perform(
            "react",
            chat_id,
            lambda out: out.react(chat_id, message_id, emoji),
            message_id=message_id,
            capable=self.capabilities.can_react,
        )

    async def send_as(
        self, identity: AgentIdentity, chat_id: str, text: str, *, thread_id: str | None = None
    ) -> MessageActionResult:
        """Post under an agent's own name (rooms); where the platform cannot change the author,
        with the name in front of the text (see `name_prefix`)."""
        try:
            return await self._perform(
                "send", chat_id, lambda out: out.send_as(identity, chat_id, text, thread_id=thread_id), text=text
            )
        except NoIdentity:
            return await self._send_named(identity, chat_id, text, thread_id)

    async def whose_direct_chat(self, chat_id: str) -> str | None:
        """The user whose private chat with the bot `chat_id` is: by its id where the
        platform's ids say so (`direct_user`), else asked of the platform; None for a group, a
        channel, a chat the platform cannot place, or the adapter not started. Never raises."""
        known = self.direct_user(chat_id)
        out = self.outbound
        if known is not None or out is None:
            return known
        try:
            return await out.whose_direct_chat(chat_id)
        except Exception as exc:  # boundary: outbound, the SDK asked whose chat it is; unknown is an answer
            log.info("%s: could not tell whose chat %s is (%s)", self.platform, chat_id, type(exc).__name__)
            return None

    async def send_direct(self, user_id: str, text: str, *, buttons: Sequence[Button] = ()) -> MessageActionResult:
        """A direct message to a user (pairing requests, notifications, approval requests); the
        result's `target` is the chat it went to, which later edits of the message need."""
        opened: list[str] = []

        async def open_chat(out: Outbound) -> None:
            opened.append(await out.direct_chat(user_id))

        result = await self._perform("send", user_id, open_chat, text=text, counted=False)
        if not result.ok:
            self._count("send", result.status)  # the message never went out: a failed send
            return result
        return await self.send(opened[0], text, buttons=buttons)

    async def send_file(
        self,
        chat_id: str,
        file: OutboundFile,
        *,
        caption: str = "",
        thread_id: str | None = None,
        reply_to: str | None = None,
    ) -> MessageActionResult:
        """Post a file. The caption goes with it up to the platform's caption limit and goes on
        in plain messages after it; `message_id` is the file's message, `message_ids` all of
        them."""
        caps = self.capabilities
        if not file.data:
            return MessageActionResult("failed", chat_id, "send_file: the file is empty")
        pieces = chunk_text(caption, caps.caption_limit, caps.length_unit) if caption.strip() else []
        first = pieces[0] if pieces else ""
        result = await self._perform(
            "send",
            chat_id,
            lambda out: out.send_file(chat_id, file, caption=first, thread_id=thread_id, reply_to=reply_to),
        )
        ids = [result.message_id] if result.message_id else []
        for piece in pieces[1:]:
            if not result.ok:
                break
            more = await self.send(chat_id, piece, thread_id=thread_id)
            if not more.ok:
                return MessageActionResult(more.status, chat_id, more.detail, result.message_id, tuple(ids))
            if more.message_id:
                ids.append(more.message_id)
        return MessageActionResult(result.status, chat_id, result.detail, result.message_id, tuple(ids))

    async def download(self, ref: Mapping[str, Any], max_bytes: int) -> bytes:
        """The bytes of an inbound attachment, never more than `max_bytes`: `FileTooLarge` when
        the declared size or the bytes themselves go over it, `FileUnavailable` for any other
        failure (in words safe to show; never the URL)."""
        out = self.outbound
        if out is None:
            raise FileUnavailable(f"the {self.platform} adapter is not started")
        limit = ByteLimit(max_bytes)
        limit.declared(ref.get("size"))
        data = bytearray()
        chunks = out.read_file(ref, limit)
        try:
            async for chunk in chunks:
                if len(data) + len(chunk) > max_bytes:
                    raise FileTooLarge(
                        len(data) + len(chunk), max_bytes, "more bytes arrived than the limit allows", counted=True
                    )
                data += chunk
        except (FileTooLarge, FileUnavailable):
            raise
        except ActionError as exc:
            raise FileUnavailable(exc.detail) from None
        except Exception as exc:  # boundary: outbound, the SDK's download; classified as _attempt does
            raise FileUnavailable(out.classify(exc, "download")[1]) from None
        finally:
            await chunks.aclose()
        return bytes(data)

    async def typing(self, chat_id: str, *, thread_id: str | None = None) -> None:
        """Show the typing indicator once; the runtime renews it every `typing_interval_s`.
        A missed indicator is harmless, so nothing here ever fails a turn."""
        out = self.outbound
        if out is None or not self.capabilities.typing:
            return
        try:
            await out.typing(chat_id, thread_id=thread_id)
        except Exception as exc:  # boundary: outbound, the SDK's typing indicator; a missed one is harmless
            log.debug("%s: typing in %s failed: %s", self.platform, chat_id, exc)

    async def create_thread(self, chat_id: str, name: str, *, message_id: str | None = None) -> MessageActionResult:
        """Open a thread named `name` in a chat (from `message_id` where the platform starts
        threads on a message); on ok, `thread_id` is where later posts go."""
        title = name.strip() or "Thread"
        opened: list[str] = []

        async def open_thread(out: Outbound) -> None:
            opened.append(await out.create_thread(chat_id, title, message_id=message_id))

        result = await self._perform("create_thread", chat_id, open_thread, capable=self.capabilities.threads)
        return replace(result, thread_id=opened[0], detail="thread created") if result.ok and opened else result

    async def end_reply(self, chat_id: str, message_ids: list[str]) -> None:
        """A reply is complete (its streamed edits included); the console ends its line here."""
        if self.outbound is not None:
            await self.outbound.end_reply(chat_id, message_ids)

    def name_prefix(self, identity: AgentIdentity) -> str:
        """What shows the agent where the post's author cannot: its name in bold (a platform
        without markdown says it its own way)."""
        return f"**{identity.name}:** "

    async def _send_named(
        self, identity: AgentIdentity, chat_id: str, text: str, thread_id: str | None
    ) -> MessageActionResult:
        """The post with the name in front, kept within the platform's limit: the runtime cuts
        a turn at the full limit, and the name could push a full piece over it (a refusal on
        most platforms), so the first piece leaves room for it and the rest follows as
        continuation messages."""
        prefix = self.name_prefix(identity)
        limit, unit = self.capabilities.max_message_length, self.capabilities.length_unit
        room = None if limit is None else limit - measure(prefix, unit)
        if room is None or room < 1 or measure(text, unit) <= room:
            return await self.send(chat_id, prefix + text, thread_id=thread_id)
        first, *rest = chunk_text(text, room, unit)
        result = await self.send(chat_id, prefix + first, thread_id=thread_id)
        for piece in rest:
            if not result.ok:
                break
            result = await self.send(chat_id, piece, thread_id=thread_id)
        return result

    async def _perform(
        self,
        action: str,
        target: str,
        call: Callable[[Outbound], Awaitable[str | None]],
        *,
        text: str | None = None,
        message_id: str | None = None,
        capable: bool = True,
        counted: bool = True,
    ) -> MessageActionResult:
        """The template every outbound action runs through; see the module docstring."""
        result = await self._attempt(action, target, call, text=text, message_id=message_id, capable=capable)
        if counted:
            self._count(action, result.status)
        return result

    def _count(self, action: str, result: str) -> None:
        OUTBOUND.labels(self.platform, action, result).inc()

    async def _attempt(
        self,
        action: str,
        target: str,
        call: Callable[[Outbound], Awaitable[str | None]],
        *,
        text: str | None,
        message_id: str | None,
        capable: bool,
    ) -> MessageActionResult:
        out = self.outbound
        if out is None:
            return MessageActionResult("no_route", target, f"{action}: the {self.platform} adapter is not started")
        if not capable:
            return MessageActionResult("unsupported", target, f"{self.platform} cannot {action}")
        if text is not None and not text.strip():
            return MessageActionResult("failed", target, "empty message")
        retryable = False
        try:
            made = await call(out)
        except NoIdentity:
            raise
        except ActionError as exc:
            status, detail = exc.status, exc.detail
        except Exception as exc:  # boundary: outbound, whatever the SDK raised is classified into the result
            status, detail = out.classify(exc, action)
            retryable = status == "failed" and out.retryable(exc)
        else:
            return MessageActionResult("ok", target, message_id=made if made is not None else message_id)
        if status != "ok":
            log.info("%s: %s in %s: %s (%s)", self.platform, action, target, status, detail)
        return MessageActionResult(
            status, target, detail, message_id=message_id if status == "ok" else None, retryable=retryable
        )


@dataclass(frozen=True, slots=True)
class PlatformSpec:
    """What a platform package hands the runtime: its name, the model of its bot.yaml section
    and how to build its adapter. Packages announce themselves under the `botweave.platforms`
    entry point, so the kernel never lists platforms and a third-party one plugs in the same way."""

    name: str
    config: type[PlatformConfig]
    create: Callable[[Any], Adapter]
