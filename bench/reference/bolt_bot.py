"""The Slack bot a user writes by hand with slack-bolt (AsyncApp, Socket Mode) and litellm.

What the Bolt for Python docs lead to: an `AsyncApp` with one `message` event listener that
skips bot and edited messages, the conversation kept in a dict per channel, the answer posted
with `say`, and `AsyncSocketModeHandler` holding the connection. Bolt acknowledges each event
and runs its listener as its own task. The Web API client is given the emulator's base URL
(`AsyncWebClient(base_url=...)`, as for Slack GovSlack or a proxy); nothing else is tuned.

    python3 bench/reference/bolt_bot.py --api-base-url URL --bot-token T --app-token T --model-base URL
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import defaultdict
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler  # noqa: E402
from slack_bolt.app.async_app import AsyncApp  # noqa: E402
from slack_bolt.context.say.async_say import AsyncSay  # noqa: E402
from slack_sdk.web.async_client import AsyncWebClient  # noqa: E402

SYSTEM_PROMPT = "You are a concise, friendly assistant."
MAX_HISTORY = 50  # turns kept per channel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base-url", required=True, help="Web API base, e.g. http://127.0.0.1:8083/api/")
    parser.add_argument("--bot-token", required=True)
    parser.add_argument("--app-token", required=True)
    parser.add_argument("--model-base", required=True, help="OpenAI-compatible base URL")
    parser.add_argument("--model", default="openai/bench-model")
    parser.add_argument(
        "--in-process-model", action="store_true",
        help="the model is a litellm custom provider in this process (bench/race_provider.py)",
    )
    args = parser.parse_args()
    if args.in_process_model:
        import race_provider  # on the path the race gives its bots

        race_provider.register()

    histories: dict[str, list[dict[str, str]]] = defaultdict(list)

    async def run() -> None:
        app = AsyncApp(client=AsyncWebClient(token=args.bot_token, base_url=args.api_base_url))

        @app.event("message")
        async def answer(event: dict[str, Any], say: AsyncSay) -> None:
            if event.get("subtype") or event.get("bot_id"):
                return
            history = histories[event["channel"]]
            user_turn = {"role": "user", "content": event.get("text", "")}
            response = await litellm.acompletion(
                model=args.model,
                api_base=args.model_base,
                api_key="sk-bench",
                messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history, user_turn],
            )
            text = response.choices[0].message.content or "…"
            await say(text)
            history += [user_turn, {"role": "assistant", "content": text}]
            del history[: -2 * MAX_HISTORY]

        await AsyncSocketModeHandler(app, args.app_token).start_async()

    asyncio.run(run())


if __name__ == "__main__":
    main()
