"""`usage.get` over the wire: a person reads their own usage (every identity their token
speaks for), another person's needs `admin`, and the `final` event names the model."""

from __future__ import annotations

import pytest
from botweave.gateway import GatewayError

from tests.emulators.openai import OpenAIEmulator, Reply
from tests.gateway.support import answer_of, client, config


async def test_usage_get_is_ones_own_unless_admin(start_app, llm: OpenAIEmulator) -> None:
    llm.queue(Reply(text="Paris.", usage={"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}))
    app = await start_app(config(llm, budgets={"per_user": {"tokens_per_day": 1000}}))
    async with client(app, "ann") as ann:
        session = await ann.create_session()
        final = await answer_of(ann, await ann.send(session, "The capital of France?"))
        own = await ann.call("usage.get")
    assert final.data["model"] == "openai/gpt-4o-mini"
    by_user = {entry["user"]: entry for entry in own["users"]}
    assert set(by_user) == {"web:ann", "telegram:1"}
    assert by_user["web:ann"]["today"]["tokens"] == 42 and by_user["web:ann"]["limits"]["tokens_per_day"] == 1000
    assert by_user["web:ann"]["today"]["cost_usd"] > 0, "gpt-4o-mini has a public price"
    async with client(app, "eve") as eve:
        with pytest.raises(GatewayError, match="admin"):
            await eve.call("usage.get", {"user": "web:ann"})
    async with client(app, "root") as root:
        theirs = await root.call("usage.get", {"user": "web:ann"})
    assert theirs["users"][0]["today"]["tokens"] == 42
