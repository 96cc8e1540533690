import pytest
from botweave.replies import chunk_text, format_footer, is_silent, measure, with_footer


@pytest.mark.parametrize(
    ("text", "allow", "token", "silent"),
    [
        ("NO_REPLY", True, None, True),
        ("  NO_REPLY\n", True, None, True),
        ("NO_REPLY", False, None, False),
        ("NO_REPLY please", True, None, False),
        ("no_reply", True, None, False),
        ("[[quiet]]", True, "[[quiet]]", True),
        ("NO_REPLY", True, "[[quiet]]", False),
    ],
)
def test_silence(text, allow, token, silent):
    assert is_silent(text, allow, token) is silent


def test_footer_shows_model_and_time_with_one_decimal():
    assert format_footer("gpt-4o", 4.2) == "— gpt-4o · 4.2s"
    assert format_footer("gpt-4o", 4.25) == "— gpt-4o · 4.2s"
    assert format_footer("gpt-4o", 0.04) == "— gpt-4o · 0.0s"


def test_footer_leaves_unknown_fields_out_and_is_empty_when_nothing_is_known():
    assert format_footer(None, 3.0) == "— 3.0s"
    assert format_footer("m", None) == "— m"
    assert format_footer(None, None) == ""
    assert with_footer("answer", "") == "answer"
    assert with_footer("answer", "— m") == "answer\n\n— m"


def test_short_text_is_one_chunk_and_no_limit_means_no_split():
    assert chunk_text("hello", 10) == ["hello"]
    assert chunk_text("x" * 10_000, None) == ["x" * 10_000]


def test_split_prefers_paragraphs_then_lines_then_sentences_then_words():
    para = "First paragraph here.\n\nSecond paragraph follows."
    assert chunk_text(para, 30) == ["First paragraph here.\n\n", "Second paragraph follows."]
    lines = "line one is here\nline two is here"
    assert chunk_text(lines, 20) == ["line one is here\n", "line two is here"]
    sentences = "Short one. Another sentence here."
    assert chunk_text(sentences, 25) == ["Short one. ", "Another sentence here."]
    words = "alpha beta gamma delta"
    assert chunk_text(words, 12) == ["alpha beta ", "gamma delta"]


def test_hard_split_when_there_is_no_break():
    assert chunk_text("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]


def test_chunks_rejoin_to_the_original_text():
    text = "Lorem ipsum dolor sit amet. " * 200 + "\n\n" + "tail\n" * 50
    chunks = chunk_text(text, 333)
    assert "".join(chunks) == text
    assert all(len(c) <= 333 for c in chunks)


def test_telegram_limit_is_counted_in_utf16_units():
    text = "😀" * 3000  # 6000 UTF-16 units, 3000 characters
    chunks = chunk_text(text, 4096, "utf16")
    assert [measure(c, "utf16") for c in chunks] == [4096, 1904]
    assert "".join(chunks) == text  # no surrogate pair was cut
    assert chunk_text(text, 4096, "chars") == [text]


def test_code_fences_are_closed_and_reopened_across_chunks():
    code = "\n".join(f"print({i})" for i in range(40))
    text = f"Here is code:\n\n```python\n{code}\n```\nDone."
    chunks = chunk_text(text, 120)
    assert len(chunks) > 2
    for chunk in chunks:
        assert len(chunk) <= 120
        assert chunk.count("```") % 2 == 0, chunk  # every chunk renders as balanced markdown
    for chunk in chunks[1:-1]:
        assert chunk.startswith("```python\n")
    body = "".join(chunks)
    for i in range(40):
        assert f"print({i})" in body
    assert chunks[-1].endswith("Done.")
