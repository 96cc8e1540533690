"""The cheapest possible Telegram "bot": the race's ceiling, not a contestant.

Raw aiohttp, no SDK, no litellm: long-poll `getUpdates`, and for each text message, as its own
task, one chat-completions request to the model and one `sendMessage`. Whatever throughput
this reaches is what the harness (Bot API emulator, model emulator, reply tracking) can carry
on this machine; a contestant far below it is measured, not the harness.

    python3 bench/race_probe.py --api-base-url URL --token T --model-base URL
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import aiohttp


async def run(api: str, model_base: str) -> None:
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as session:

        async def answer(message: dict[str, Any]) -> None:
            body = {"model": "bench-model", "messages": [{"role": "user", "content": message["text"]}]}
            async with session.post(f"{model_base}/chat/completions", json=body) as response:
                text = (await response.json())["choices"][0]["message"]["content"]
            async with session.post(f"{api}/sendMessage", json={"chat_id": message["chat"]["id"], "text": text}) as sent:
                await sent.read()

        offset = 0
        while True:
            async with session.post(f"{api}/getUpdates", json={"offset": offset, "timeout": 10}) as response:
                updates = (await response.json())["result"]
            for update in updates:
                offset = update["update_id"] + 1
                message = update.get("message") or {}
                if message.get("text"):
                    task = asyncio.create_task(answer(message))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base-url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--model-base", required=True)
    args = parser.parse_args()
    asyncio.run(run(args.api_base_url + args.token, args.model_base))


if __name__ == "__main__":
    main()
