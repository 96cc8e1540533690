"""Declared MIME types: what passes is RFC 6838 syntax, normalised; everything else is unknown,
and unknown matches no `allow_mime` pattern."""

from __future__ import annotations

from botweave.files import mime_of
from botweave.mime import MAX_LENGTH, base_mime, clean_mime, mime_allowed, mime_parameter


def test_a_mime_type_is_normalised_and_keeps_the_parameters_that_parse():
    assert clean_mime("Image/PNG") == "image/png"
    assert clean_mime(" text/plain;Charset=UTF-8 ") == "text/plain; charset=UTF-8"
    assert clean_mime('text/plain; charset="utf-8"; format=flowed') == 'text/plain; charset="utf-8"; format=flowed'
    assert clean_mime("application/vnd.openxmlformats-officedocument.wordprocessingml.document") is not None
    assert clean_mime("audio/ogg; codecs=opus\r\nX-Injected: yes") == "audio/ogg; codecs=opus"
    assert mime_parameter('text/plain; charset="latin-1"', "charset") == "latin-1"
    assert mime_parameter("text/plain", "charset") is None


def test_what_is_not_a_mime_type_is_unknown():
    for value in (
        None, 3, "", "png", "image/", "/png", "image/png/x", "image/png x", "image /png", "imáge/png",
        "audio/ogg\r\nX-Injected: yes", "audio/ogg\nX: y", "audio/*", "application/" + "x" * 5000,
        "-image/png", "image/p\x00ng",
    ):
        assert clean_mime(value) is None, value
        assert base_mime(value) == ""
        assert not mime_allowed(value, ["*/*", "audio/*"])


def test_a_clean_type_is_short_and_single_line():
    long = "text/plain" + "".join(f"; p{i}=v{i}" for i in range(200))
    clean = clean_mime(long)
    assert clean is not None and len(clean) <= MAX_LENGTH and clean.startswith("text/plain; p0=v0")
    assert all(" " <= c <= "~" for c in clean)


def test_allow_mime_matches_types_and_wildcards_only():
    assert mime_allowed("image/webp", ["image/*"]) and mime_allowed("Text/Plain; charset=utf-8", ["text/*"])
    assert mime_allowed("application/pdf", ["application/pdf"]) and mime_allowed("x/y", ["*/*"])
    assert not mime_allowed("application/zip", ["image/*", "text/*", "application/pdf"])
    assert not mime_allowed("image/png", ["image/p*"])  # a pattern is a type, a subtype or *


def test_an_attachment_with_a_malformed_type_is_typed_by_its_name_or_unknown():
    assert mime_of({"mime": "application/pdf\r\nX: y", "filename": "notes.pdf"}) == "application/pdf"
    assert mime_of({"mime": "x" * 5000}) == "application/octet-stream"
