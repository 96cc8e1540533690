"""The gateway guide's client example (docs/guides/gateway-clients.md), run as printed against
a bot with the gateway (only the address differs: tests never take a fixed port)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from botweave import App

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "gateway-clients.md"


def example() -> str:
    block = GUIDE.read_text().split("<!-- gateway-example -->")[1].split("<!-- /gateway-example -->")[0]
    return block.split("```python")[1].split("```")[0]


async def test_the_documented_client_example_works_as_printed(start_app) -> None:
    code = example()
    lines = [line for line in code.strip().splitlines() if line.strip()]
    assert len(lines) <= 11 and lines[-1] == "asyncio.run(main())", "a short example, run by its last line"
    app: App = await start_app({"agents": {"assistant": {"model": "offline/echo"}}, "gateway": {"listen": "127.0.0.1:0"}})
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(code.replace("asyncio.run(main())", ""), str(GUIDE), "exec"), namespace)  # noqa: S102 - the guide's own code
    printed = io.StringIO()
    assert app.gateway is not None
    with contextlib.redirect_stdout(printed):
        await namespace["main"](app.gateway.url)  # type: ignore[operator]
    shown = printed.getvalue().splitlines()
    assert "message What can you do?" in shown  # the person's message, as the session keeps it
    assert "".join(line.removeprefix("delta ") for line in shown if line.startswith("delta ")).startswith("assistant")
    assert shown[-1] == "final assistant (offline echo) heard: What can you do?"
