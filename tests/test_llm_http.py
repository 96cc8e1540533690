"""A model's real HTTP path (plain and streamed) against a loopback OpenAI-compatible server,
through each client an `openai/` model can be called with: litellm, and botweave's own."""

import pytest
from botweave import App

from tests.emulators.openai import OpenAIEmulator
from tests.support import RecordingAdapter, message

CLIENTS = ["litellm", "direct"]


def app_for(llm: OpenAIEmulator, client: str, **bot) -> tuple[App, RecordingAdapter]:
    app = App.from_config(
        {
            "bot": {"unknown_user_policy": "allow", **bot},
            "agents": {
                "remote": {
                    "model": "openai/gpt-emulated",
                    "api_base": llm.base_url,
                    "api_key": "sk-loopback",
                    "instructions": "Be brief.",
                    "temperature": 0.3,
                    "max_tokens": 64,
                }
            },
            "models": {"client": client},
        }
    )
    adapter = RecordingAdapter()
    adapter.capabilities = adapter.capabilities.__class__(max_message_length=1000)
    app.add_adapter(adapter)
    return app, adapter


@pytest.mark.parametrize("client", CLIENTS)
async def test_plain_completion_over_http(llm, client):
    app, adapter = app_for(llm, client)
    await app.handle(message("first question"))
    await app.handle(message("second question"))
    assert adapter.texts() == [llm.reply, llm.reply]
    sent = llm.requests[-1]
    assert sent["model"] == "gpt-emulated"
    assert sent["temperature"] == 0.3 and sent["max_tokens"] == 64
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": llm.reply},
        {"role": "user", "content": "second question"},
    ]
    assert sent.get("stream") in (None, False)


@pytest.mark.parametrize("client", CLIENTS)
async def test_streamed_completion_over_http(llm, client):
    app, adapter = app_for(llm, client, streaming=True, stream_edit_interval_ms=0)
    outcome = await app.handle(message("stream please"))
    assert llm.requests[-1]["stream"] is True
    assert llm.requests[-1]["stream_options"] == {"include_usage": True}
    assert len(adapter.sent) == 1 and adapter.edits
    assert adapter.edits[-1][1] == llm.reply + " "
    assert outcome.status == "replied"


@pytest.mark.parametrize("client", CLIENTS)
async def test_http_error_from_the_model_becomes_an_apology(llm, client):
    llm.fail_with = 500
    app, adapter = app_for(llm, client)
    outcome = await app.handle(message("hi"))
    assert outcome.status == "agent_error"
    assert adapter.texts() and adapter.texts()[0].startswith("Sorry")
    # a 500 may be passing: asked once more after a pause, then the turn fails (the agent has
    # no other model to ask)
    assert len(llm.exchanges) == 2
