"""The Discord bot a user writes by hand with discord.py and litellm.

What the discord.py docs lead to: a `discord.Client` with the message-content intent, an
`on_message` event that skips the bot's own messages, the conversation kept in a dict per
channel, and the answer sent with `message.channel.send`. discord.py runs each event as its
own task. discord.py has no setting for another server, so the REST base and the gateway
are moved with its class attributes `Route.BASE` and `DiscordWebSocket.DEFAULT_GATEWAY`;
those two lines are the only ones a user would not write.

    python3 bench/reference/discordpy_bot.py --api-base URL --gateway URL --token T --model-base URL
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import discord  # noqa: E402
import litellm  # noqa: E402
import yarl  # noqa: E402

SYSTEM_PROMPT = "You are a concise, friendly assistant."
MAX_HISTORY = 50  # turns kept per channel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base", required=True, help="REST base, e.g. http://127.0.0.1:8082/api/v10")
    parser.add_argument("--gateway", required=True, help="gateway URL, e.g. ws://127.0.0.1:8082/gateway")
    parser.add_argument("--token", required=True)
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

    discord.http.Route.BASE = args.api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(args.gateway)
    intents = discord.Intents.default()
    intents.message_content = True
    client = discord.Client(intents=intents)
    histories: dict[int, list[dict[str, str]]] = defaultdict(list)

    @client.event
    async def on_message(message: discord.Message) -> None:
        if message.author.bot:
            return
        history = histories[message.channel.id]
        user_turn = {"role": "user", "content": message.content}
        response = await litellm.acompletion(
            model=args.model,
            api_base=args.model_base,
            api_key="sk-bench",
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history, user_turn],
        )
        text = response.choices[0].message.content or "…"
        await message.channel.send(text)
        history += [user_turn, {"role": "assistant", "content": text}]
        del history[: -2 * MAX_HISTORY]

    client.run(args.token)


if __name__ == "__main__":
    main()
