"""Ask the bot one question through the gateway and print the answer as it arrives.

    python ask.py "What can you do?" [--url ws://127.0.0.1:8787/ws] [--token TOKEN]

The client reconnects and resumes by itself if the connection drops, so the answer is
printed whole and once even across a restart of the bot.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from botweave.gateway import Client


async def ask(question: str, url: str, token: str | None = None) -> str:
    async with Client(url, token) as client:
        session = await client.create_session(title=question[:40])
        await client.send(session, question)
        async for event in client.events():
            if event.event == "delta":
                print(event.data.get("text", ""), end="", flush=True)
            elif event.event == "final":
                print()
                return str(event.data.get("text", ""))
    return ""


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--url", default="ws://127.0.0.1:8787/ws")
    parser.add_argument("--token", default=os.environ.get("BOTWEAVE_GATEWAY_TOKEN"))
    arguments = parser.parse_args()
    asyncio.run(ask(arguments.question, arguments.url, arguments.token))
