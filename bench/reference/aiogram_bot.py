"""The Telegram bot a user writes by hand with aiogram 3 and litellm.

What the aiogram docs lead to: a `Dispatcher` with one text handler, the conversation kept in
the FSM storage (`FSMContext`, in memory by default), the answer sent with `message.answer`,
and `start_polling`, which runs each update as its own task over aiogram's aiohttp session.
The only change from the docs' quick start is the Bot API server, pointed at the emulator
with `TelegramAPIServer.from_base`, as for a self-hosted Bot API server.

    python3 bench/reference/aiogram_bot.py --server URL --token T --model-base URL
"""

from __future__ import annotations

import argparse
import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from aiogram import Bot, Dispatcher, F  # noqa: E402
from aiogram.client.session.aiohttp import AiohttpSession  # noqa: E402
from aiogram.client.telegram import TelegramAPIServer  # noqa: E402
from aiogram.fsm.context import FSMContext  # noqa: E402
from aiogram.types import Message  # noqa: E402

SYSTEM_PROMPT = "You are a concise, friendly assistant."
MAX_HISTORY = 50  # turns kept per chat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="Bot API server root, e.g. http://127.0.0.1:8081")
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

    dp = Dispatcher()

    @dp.message(F.text)
    async def answer(message: Message, state: FSMContext) -> None:
        history: list[dict[str, str]] = (await state.get_data()).get("history", [])
        user_turn = {"role": "user", "content": message.text or ""}
        response = await litellm.acompletion(
            model=args.model,
            api_base=args.model_base,
            api_key="sk-bench",
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history, user_turn],
        )
        text = response.choices[0].message.content or "…"
        await message.answer(text)
        history = [*history, user_turn, {"role": "assistant", "content": text}][-2 * MAX_HISTORY :]
        await state.update_data(history=history)

    async def run() -> None:
        session = AiohttpSession(api=TelegramAPIServer.from_base(args.server))
        bot = Bot(token=args.token, session=session)
        await dp.start_polling(bot)

    asyncio.run(run())


if __name__ == "__main__":
    main()
