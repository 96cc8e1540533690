import pytest
from botweave.streaming import StreamingReply
from botweave.types import MessageActionResult


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


class Recorder:
    def __init__(self) -> None:
        self.sent: list[str] = []
        self.edits: list[tuple[str, str]] = []
        self.deleted: list[str] = []

    async def send(self, text: str, index: int) -> MessageActionResult:
        self.sent.append(text)
        return MessageActionResult("ok", message_id=f"m{len(self.sent)}")

    async def edit(self, message_id: str, text: str) -> MessageActionResult:
        self.edits.append((message_id, text))
        return MessageActionResult("ok", message_id=message_id)

    async def delete(self, message_id: str) -> MessageActionResult:
        self.deleted.append(message_id)
        return MessageActionResult("ok")


def driver(rec: Recorder, clock: FakeClock, interval: float, limit: int | None = None) -> StreamingReply:
    return StreamingReply(rec.send, rec.edit, rec.delete, interval, limit, clock=clock, sleep=clock.sleep)


async def stream(reply: StreamingReply, clock: FakeClock, tokens: list[str], gap: float) -> str:
    text = ""
    for token in tokens:
        clock.now += gap
        text += token
        await reply.update(text)
    return text


@pytest.mark.parametrize(
    ("tokens", "gap", "interval", "expected_edits"),
    [
        # 100 tokens 0.1 s apart = 10 s of streaming; one edit per full second at most
        (100, 0.1, 1.0, 10),
        # a slower floor (Telegram groups) allows fewer edits over the same stream
        (100, 0.1, 3.1, 4),
        # tokens slower than the interval: every token may be shown
        (5, 2.0, 1.0, 5),
    ],
)
async def test_edit_count_is_bounded_by_the_interval(tokens, gap, interval, expected_edits):
    rec, clock = Recorder(), FakeClock()
    reply = driver(rec, clock, interval)
    text = await stream(reply, clock, [f"t{i} " for i in range(tokens)], gap)
    await reply.finish(text.strip())
    assert len(rec.sent) == 1  # one message, edited in place: no second "final" post
    assert reply.edits == len(rec.edits) == expected_edits
    assert rec.edits[-1][1] == text.strip()  # ends with the exact final text


async def test_final_edit_waits_for_the_interval():
    rec, clock = Recorder(), FakeClock()
    reply = driver(rec, clock, 1.0)
    await reply.update("hello")
    clock.now += 0.2
    await reply.update("hello wor")  # too soon: not written
    await reply.finish("hello world")
    assert rec.sent == ["hello"]
    assert rec.edits == [("m1", "hello world")]
    assert clock.now == pytest.approx(1.0)


async def test_text_that_outgrows_one_message_continues_in_a_new_one():
    rec, clock = Recorder(), FakeClock()
    reply = driver(rec, clock, 0.5, limit=20)
    words = [f"word{i} " for i in range(12)]
    text = await stream(reply, clock, words, 1.0)
    ids = await reply.finish(text)
    assert len(ids) == len(rec.sent) >= 4
    shown = {mid: t for mid, t in rec.edits}
    final = [shown.get(mid, rec.sent[int(mid[1:]) - 1]) for mid in ids]
    assert "".join(final) == text
    assert all(len(t) <= 20 for t in final)


async def test_discard_deletes_what_was_streamed():
    rec, clock = Recorder(), FakeClock()
    reply = driver(rec, clock, 1.0)
    await reply.update("partial")
    await reply.discard()
    assert rec.deleted == ["m1"] and reply.message_ids == []
