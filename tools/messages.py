"""The built-in message tools: an agent posts, reacts, edits, deletes and opens threads.

They speak the target grammar every part of botweave uses (`origin` is the conversation being
answered, `<platform>` that platform's home chat, `<platform>:<chat>[:<thread>]` a chat or a
thread) and act only through `Delivery`, so hooks, the outbox and each platform's rate limits
apply to what an agent does exactly as to what it says. Each returns the action's result as
`{"status", "target", "message_ids", "detail"}`: the ids let the model edit or delete what it
posted later in the turn, or in a later turn (they stay in history).

An agent may edit and delete only what the bot itself posted (`SentLedger`): a bot that is a
group admin could otherwise be talked into deleting what people wrote. And every tool acts
only where the `TargetRule` the runtime handed in allows (the chats the bot talks in, the
conversation being answered, the agent's `message_tools.allow_targets`); anywhere else the
call is refused, as a tool error the model reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from botweave.delivery import Delivery, Destination
from botweave.files import FileLimits, FileSource, send_file
from botweave.targets import TargetRule, Targets
from botweave.tooling import Egress, ToolContext, ToolRefused, action_output
from botweave.tools.fetch import without_credentials
from botweave.tools.python import FunctionTool, function_tool
from botweave.types import MessageActionResult

MESSAGE_TOOLS = ("send_message", "react", "edit_message", "delete_message", "create_thread", "send_file")


def _no_route(target: str, detail: str = "target not resolvable") -> dict[str, Any]:
    return action_output(MessageActionResult("no_route", target, detail), target)


class MessageTools:
    """The message tools of the running bot, bound to its delivery, targets and the rule of
    where agents may act; `send_file` also needs each agent's media settings and network
    egress policy."""

    def __init__(
        self,
        delivery: Delivery,
        targets: Targets,
        *,
        rule: TargetRule,
        media_for: Callable[[str], FileLimits],
        egress_for: Callable[[str], Egress],
    ) -> None:
        self.delivery = delivery
        self.targets = targets
        self.rule = rule
        self._media_for = media_for
        self._egress_for = egress_for

    def tools(self, names: tuple[str, ...] = MESSAGE_TOOLS) -> dict[str, FunctionTool]:
        return {name: function_tool(getattr(self, name)) for name in names}

    async def _resolve(self, target: str, context: ToolContext) -> Destination | None:
        """Where `target` is, or None when it names nowhere; ToolRefused where the agent may not act."""
        to = self.targets.resolve(target.strip() or "origin", context.origin)
        if to is not None:
            refusal = await self.rule.refusal(context.agent, to, context.origin)
            if refusal is not None:
                raise ToolRefused(refusal)
        return to

    async def _own(self, to: Destination, message_id: str) -> bool:
        ledger = self.delivery.ledger
        return ledger is not None and await ledger.is_own(to.adapter.platform, to.chat_id, message_id)

    async def send_message(self, target: str, text: str, context: ToolContext) -> dict[str, Any]:
        """Post a message to a chat. The reply to the person you are answering is your normal
        answer; use this to post somewhere else, or an extra message.

        Args:
            target: Where to post: "origin" (this conversation), a platform name for its home
                chat ("telegram"), "platform:chat_id" or "platform:chat_id:thread_id".
            text: The message, in Markdown.
        """
        to = await self._resolve(target, context)
        if to is None:
            return _no_route(target)
        key = None
        origin = context.origin
        if origin is not None:
            # A turn that runs again (after a crash) must not post the same message twice.
            digest = hashlib.sha1(f"{to.target}\n{text}".encode()).hexdigest()[:16]
            key = f"out:{origin.platform}:{origin.channel.channel_id}:{origin.message_id}:tool:{digest}"
        delivered = await self.delivery.post(to, text, key=key, origin=origin)
        return action_output(delivered.result(to.target), to.target)

    async def react(
        self, emoji: str, context: ToolContext, message_id: str | None = None, target: str = "origin"
    ) -> dict[str, Any]:
        """React to a message with an emoji.

        Args:
            emoji: The emoji, e.g. "👍".
            message_id: The message to react to; the message you are answering when left out.
            target: The chat the message is in; "origin" (this conversation) when left out.
        """
        to = await self._resolve(target, context)
        if to is None:
            return _no_route(target)
        if message_id is None:
            if context.origin is None or target.strip() not in ("", "origin"):
                return _no_route(target, "give the message_id to react to")
            message_id = context.origin.message_id
        return action_output(await self.delivery.react(to, message_id, emoji), to.target)

    async def edit_message(
        self, message_id: str, text: str, context: ToolContext, target: str = "origin"
    ) -> dict[str, Any]:
        """Replace the text of a message this bot posted.

        Args:
            message_id: The id of the bot's message (from an earlier tool result).
            text: The new text, in Markdown.
            target: The chat the message is in; "origin" (this conversation) when left out.
        """
        to = await self._resolve(target, context)
        if to is None:
            return _no_route(target)
        if not await self._own(to, message_id):
            return action_output(MessageActionResult("failed", to.target, "only messages this bot posted can be edited"))
        result = await self.delivery.edit(to, message_id, text, origin=context.origin)
        return action_output(result, to.target)

    async def delete_message(self, message_id: str, context: ToolContext, target: str = "origin") -> dict[str, Any]:
        """Delete a message this bot posted.

        Args:
            message_id: The id of the bot's message (from an earlier tool result).
            target: The chat the message is in; "origin" (this conversation) when left out.
        """
        to = await self._resolve(target, context)
        if to is None:
            return _no_route(target)
        if not await self._own(to, message_id):
            return action_output(MessageActionResult("failed", to.target, "only messages this bot posted can be deleted"))
        return action_output(await self.delivery.delete(to, message_id), to.target)

    async def create_thread(self, name: str, context: ToolContext, target: str = "origin") -> dict[str, Any]:
        """Open a new thread and return its target, to post into it with send_message.

        Args:
            name: The thread's title.
            target: The chat to open it in; "origin" (this conversation) when left out.
        """
        to = await self._resolve(target, context)
        if to is None:
            return _no_route(target)
        origin = context.origin
        starter = None
        if origin is not None and target.strip() in ("", "origin") and origin.thread_id is None:
            starter = origin.message_id  # where a platform starts threads on a message
        result = await self.delivery.create_thread(to, name, message_id=starter, origin=origin)
        if not result.ok or result.thread_id is None:
            return action_output(result, to.target)
        thread = Destination(to.adapter, to.chat_id, result.thread_id)
        return {**action_output(result, thread.target), "thread_id": result.thread_id}

    async def send_file(
        self,
        context: ToolContext,
        target: str = "origin",
        url: str | None = None,
        data_base64: str | None = None,
        path: str | None = None,
        filename: str | None = None,
        caption: str = "",
    ) -> dict[str, Any]:
        """Post a file (an image is shown as a picture). Give exactly one source.

        Args:
            target: Where to post: "origin" (this conversation), a platform name for its home
                chat, "platform:chat_id" or "platform:chat_id:thread_id".
            url: An http(s) address to fetch the file from (within the network policy).
            data_base64: The file's bytes, base64-encoded.
            path: A file inside the configured files folder.
            filename: The name to post it under (defaults from the source).
            caption: Text shown with the file, in Markdown.
        """
        await self._resolve(target, context)  # where it may not post, refused before a byte is loaded
        origin = context.origin
        key = None
        if origin is not None:
            # A turn that runs again (after a crash) must not post the same file twice.
            source = url or path or hashlib.sha1((data_base64 or "").encode()).hexdigest()
            digest = hashlib.sha1(f"{target}\n{source}\n{filename}\n{caption}".encode()).hexdigest()[:16]
            key = f"out:{origin.platform}:{origin.channel.channel_id}:{origin.message_id}:file:{digest}"
        result = await send_file(
            self.delivery,
            self.targets,
            target,
            FileSource(data_base64=data_base64, path=path, url=url, filename=filename),
            media=self._media_for(context.agent),
            origin=origin,
            caption=caption,
            egress=without_credentials(self._egress_for(context.agent).refusal),
            key=key,
        )
        return action_output(result, result.target)
