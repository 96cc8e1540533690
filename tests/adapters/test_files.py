"""Files on every platform, through the real SDKs: the bot posts an image and a document, a
caption longer than the platform allows continues after the file, and a file a person sent is
read through the platform's API within the size limit (declared and actual).

The drivers (platforms.py) say in each platform's terms what a person sees and sends.
"""

from __future__ import annotations

import pytest
from botweave.adapter import FileTooLarge
from botweave.types import OutboundFile

from tests.adapters.platforms import PlatformDriver
from tests.emulators.telegram import png_bytes

PNG = png_bytes(6, 4)
REPORT = b"Quarterly numbers\nrevenue: 42\n"


async def test_an_image_and_a_document_are_posted_with_their_captions(platform: PlatformDriver) -> None:
    adapter = platform.adapter
    image = await adapter.send_file(platform.chat, OutboundFile(PNG, "chart.png", "image/png"), caption="the chart")
    document = await adapter.send_file(platform.chat, OutboundFile(REPORT, "report.txt", "text/plain"), caption="numbers")
    assert image.ok and image.message_id and document.ok, (image, document)
    posted = platform.files_posted()
    assert [(p.filename, p.data, p.caption) for p in posted] == [
        ("chart.png", PNG, "the chart"),
        ("report.txt", REPORT, "numbers"),
    ]
    if platform.name == "telegram":  # a picture is shown as a photo, anything else as a file
        assert [p.shown_as for p in posted] == ["photo", "document"]
    if platform.name != "slack":  # Slack reports the sharing message's ts only sometimes
        assert posted[0].message_id == image.message_id


async def test_a_caption_over_the_platform_limit_continues_in_messages(platform: PlatformDriver) -> None:
    limit = platform.adapter.capabilities.caption_limit
    caption = " ".join(f"word{i}" for i in range(((limit or 1000) + 300) // 6))
    sent = await platform.adapter.send_file(platform.chat, OutboundFile(PNG, "chart.png", "image/png"), caption=caption)
    assert sent.ok
    (posted,) = platform.files_posted()
    follow_ups = [platform.text_of(i) or "" for i in sent.message_ids[1:]]
    if limit is None or len(caption) <= limit:
        assert posted.caption == caption and follow_ups == []
        return
    assert len(posted.caption) <= limit and follow_ups
    assert " ".join([posted.caption, *follow_ups]).split() == caption.split()


async def test_an_empty_file_is_refused_before_the_platform_is_asked(platform: PlatformDriver) -> None:
    before = platform.sent_so_far()
    result = await platform.adapter.send_file(platform.chat, OutboundFile(b"", "empty.txt", "text/plain"))
    assert result.status == "failed" and "empty" in result.detail
    assert platform.sent_so_far() == before


async def test_a_file_a_person_sent_is_read_through_the_platform(platform: PlatformDriver) -> None:
    if not platform.receives_files:
        pytest.skip(f"{platform.name} receives no files")
    msg = await platform.person_sends_file(REPORT, "report.txt", "text/plain", caption="see attached")
    (ref,) = msg.attachments
    assert await platform.adapter.download(ref, max_bytes=10_000) == REPORT
    assert platform.file_fetches() == 1


async def test_a_declared_size_over_the_limit_is_refused_without_fetching(platform: PlatformDriver) -> None:
    if not platform.receives_files:
        pytest.skip(f"{platform.name} receives no files")
    msg = await platform.person_sends_file(b"x" * 5000, "big.txt", "text/plain")
    with pytest.raises(FileTooLarge) as refused:
        await platform.adapter.download(msg.attachments[0], max_bytes=1000)
    assert refused.value.size == 5000 and refused.value.limit == 1000
    assert platform.file_fetches() == 0


async def test_a_file_larger_than_it_declared_is_cut_off_at_the_limit(platform: PlatformDriver) -> None:
    if not platform.receives_files:
        pytest.skip(f"{platform.name} receives no files")
    msg = await platform.person_sends_file(b"y" * 300_000, "liar.txt", "text/plain", declared_size=10)
    with pytest.raises(FileTooLarge) as refused:
        await platform.adapter.download(msg.attachments[0], max_bytes=100_000)
    assert refused.value.limit == 100_000 and (refused.value.counted or refused.value.size == 300_000)


async def test_a_reply_carries_the_files_of_the_message_it_answers(platform: PlatformDriver) -> None:
    if not platform.receives_files:
        pytest.skip(f"{platform.name} receives no files")
    photo = await platform.person_sends_file(PNG, "cat.png", "image/png")
    reply = await platform.person_replies("what is this?", photo)
    assert reply.quoted is not None and reply.quoted.message_id == photo.message_id
    (ref,) = reply.quoted.attachments
    assert await platform.adapter.download(ref, max_bytes=10_000) == PNG
