"""/report: a member tells the moderator (the platform's owner_user_id) about a problem.

The moderator is reached the way every notification is (botweave's push: a DM by default,
within their categories and quiet hours), so a report is never lost in a busy channel.
"""

from __future__ import annotations


def setup(app):
    async def report(inbound):
        message = inbound.message
        text = " ".join(message.command_args or []).strip()
        if not text:
            return "Usage: /report what happened (and where)"
        moderator = app.config.bot_config_for(message.platform).owner_user_id
        if not moderator:
            return "This server has no moderator set up; please tell an admin."
        where = "a direct message" if message.channel.channel_type == "dm" else f"<#{message.channel.channel_id}>"
        await app.notify(
            "human_mentioned",
            [f"{message.platform}:{moderator}"],
            f"Report from {message.sender.display_name} in {where}: {text}",
            identity="moderation",
            urgent=True,
        )
        return "Thanks, the moderator has been told."

    app.commands.register("report", report, help="tell the moderator about a problem", args="TEXT")
