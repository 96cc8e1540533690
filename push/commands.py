"""`/notify`: a person changes their own notification settings, in a direct message."""

from __future__ import annotations

from botweave.commands import CommandHandler
from botweave.pipeline import Inbound
from botweave.push.preferences import PreferenceStore

NOTIFY_HELP = "your notification settings (in a direct message; /notify help)"


def notify_command(preferences: PreferenceStore) -> CommandHandler:
    async def notify(inbound: Inbound) -> str:
        msg = inbound.message
        if msg.is_group:
            return "Notification settings are personal: send /notify to me in a direct message."
        result = await preferences.apply_command(msg.platform, msg.sender.user_id, " ".join(msg.command_args))
        return result.reply

    return notify
