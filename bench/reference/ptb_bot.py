"""The Telegram bot a user writes by hand with python-telegram-bot and litellm.

What the python-telegram-bot docs lead to: an `Application` polling for updates, one
`MessageHandler` for text, the conversation kept in `context.chat_data`, and the model's
answer sent back with `reply_text`. By default PTB handles one update at a time
(`--concurrent` turns on `concurrent_updates`, the documented switch for running handlers
concurrently). Nothing is tuned: the race compares botweave against exactly this.

    python3 bench/reference/ptb_bot.py --api-base-url URL --token T --model-base URL [--concurrent]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from telegram import Update  # noqa: E402
from telegram.ext import Application, ContextTypes, MessageHandler, filters  # noqa: E402

SYSTEM_PROMPT = "You are a concise, friendly assistant."
MAX_HISTORY = 50  # turns kept per chat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api-base-url", required=True, help="Bot API base, e.g. http://127.0.0.1:8081/bot")
    parser.add_argument("--token", required=True)
    parser.add_argument("--model-base", required=True, help="OpenAI-compatible base URL")
    parser.add_argument("--model", default="openai/bench-model")
    parser.add_argument(
        "--in-process-model", action="store_true",
        help="the model is a litellm custom provider in this process (bench/race_provider.py)",
    )
    parser.add_argument("--concurrent", action="store_true")
    args = parser.parse_args()
    if args.in_process_model:
        import race_provider  # on the path the race gives its bots

        race_provider.register()

    async def answer(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        history: list[dict[str, str]] = context.chat_data.setdefault("history", [])  # type: ignore[union-attr]
        user_turn = {"role": "user", "content": update.message.text}
        response = await litellm.acompletion(
            model=args.model,
            api_base=args.model_base,
            api_key="sk-bench",
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history, user_turn],
        )
        text = response.choices[0].message.content or "…"
        await update.message.reply_text(text)
        history += [user_turn, {"role": "assistant", "content": text}]
        del history[: -2 * MAX_HISTORY]

    builder = Application.builder().token(args.token).base_url(args.api_base_url)
    if args.concurrent:
        builder = builder.concurrent_updates(True)
    app = builder.build()
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, answer))
    app.run_polling()


if __name__ == "__main__":
    main()
