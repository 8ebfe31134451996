"""log_lines: byte chunks to whole lines, the per-job cap, and no line shown twice."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.logs.log_lines import LineJoiner, LogCap, SeenLines, split_timestamp


def _join(chunks: list[bytes]) -> list[str]:
    joiner = LineJoiner()
    lines = [line for chunk in chunks for line in joiner.feed(chunk)]
    return lines + joiner.flush()


def test_a_line_split_across_chunks_comes_out_once_and_whole():
    assert _join([b"step 1 lo", b"ss 0.5\nstep 2", b" loss 0.4\n"]) == [
        "step 1 loss 0.5",
        "step 2 loss 0.4",
    ]


LINE = "époch ✓ 🚀\n".encode()  # two-, three- and four-byte characters


@pytest.mark.parametrize("cut", range(1, len(LINE)))
def test_every_cut_of_a_multibyte_line_gives_the_same_text(cut):
    data = LINE
    assert _join([data[:cut], data[cut:]]) == ["époch ✓ 🚀"]


def test_one_byte_at_a_time():
    data = "a ✓\r\nb\n\nc".encode()
    assert _join([data[i : i + 1] for i in range(len(data))]) == ["a ✓", "b", "", "c"]


def test_crlf_is_a_line_end_even_when_the_cr_and_lf_arrive_apart():
    assert _join([b"one\r", b"\ntwo\r\n"]) == ["one", "two"]


def test_undecodable_bytes_are_replaced_not_fatal():
    assert _join([b"bad \xff\xfe byte\n"]) == ["bad \ufffd\ufffd byte"]


def test_a_final_partial_line_is_flushed_at_the_end_of_the_stream():
    joiner = LineJoiner()
    assert joiner.feed(b"done\nexit cod") == ["done"]
    assert joiner.feed(b"e 0") == []
    assert joiner.flush() == ["exit code 0"]
    assert joiner.flush() == []


def test_a_truncated_character_at_the_end_is_replaced():
    assert _join(["✓".encode()[:2]]) == ["\ufffd"]


def test_the_cap_on_lines_says_so_once():
    cap = LogCap(max_lines=2, max_bytes=1000)
    results = [cap.admit(f"line {i}") for i in range(5)]
    assert [shown for shown, _ in results] == [True, True, False, False, False]
    notices = [notice for _, notice in results if notice]
    assert notices == ["... master log capped at 2 lines (12 bytes); the full log is in the pod"]
    assert cap.reached


def test_the_cap_on_bytes_counts_utf8_bytes():
    cap = LogCap(max_lines=100, max_bytes=5)
    assert cap.admit("✓✓")[0] is False  # six bytes, though two characters
    assert cap.reached


def test_a_line_that_fits_exactly_is_shown():
    cap = LogCap(max_lines=1, max_bytes=3)
    assert cap.admit("abc") == (True, None)
    shown, notice = cap.admit("")
    assert not shown and "capped at 1 lines" in notice


def test_split_timestamp_orders_fractions_of_any_length():
    early, text = split_timestamp("2026-01-02T03:04:05.49Z hello world")
    late, _ = split_timestamp("2026-01-02T03:04:05.5Z x")
    whole, _ = split_timestamp("2026-01-02T03:04:05Z x")
    assert text == "hello world"
    assert whole < early < late


def test_a_line_without_a_timestamp_is_kept_unchanged():
    assert split_timestamp("no stamp here") == (None, "no stamp here")


def _stamped(seen: SeenLines, lines: list[str]) -> list[str]:
    shown = []
    for line in lines:
        stamp, text = split_timestamp(line)
        if seen.is_new(stamp):
            shown.append(text)
    return shown


def test_a_reopened_stream_skips_what_was_shown_even_lines_sharing_a_stamp():
    log = [
        "2026-01-01T00:00:01.000001Z a",
        "2026-01-01T00:00:02.000001Z b",
        "2026-01-01T00:00:02.000001Z c",
        "2026-01-01T00:00:03Z d",
        "2026-01-01T00:00:03Z e",
    ]
    seen = SeenLines()
    assert _stamped(seen, log[:3]) == ["a", "b", "c"]
    seen.reopened()  # the stream replays from the start and goes on
    assert _stamped(seen, log) == ["d", "e"]
    seen.reopened()
    assert _stamped(seen, log[:4]) == []
    assert _stamped(seen, ["2026-01-01T00:00:03Z f"]) == []  # e's stamp, e's turn: skipped
    assert _stamped(seen, ["2026-01-01T00:00:03Z g"]) == ["g"]


def test_a_new_stream_without_reopened_shows_lines_sharing_the_last_stamp():
    seen = SeenLines()
    assert _stamped(seen, ["2026-01-01T00:00:01Z a", "2026-01-01T00:00:01Z b"]) == ["a", "b"]
