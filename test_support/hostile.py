"""Hostile text for property-based tests: YAML, JSON, Jinja and macro metacharacters."""

from __future__ import annotations

from hypothesis import strategies as st

META = [
    "\n",
    "spec: {evil: 1}",
    "{{ 7*7 }}",
    "{% raw %}",
    "${run_id}",
    "$${x}",
    "${",
    "}",
    '"',
    "'",
    "---",
    "- a",
    "&a",
    "*a",
    "!!python/object",
    "#",
    "\\",
    "\x00",
    "İ",
    "😀",
    "${v}",
    ": ",
    "|",
    '{"a": 1}',
    "[1, 2]",
    "null",
    "true",
    "0x1F",
    "1e309",
    "٣",
]


def hostile_text(part_size: int, parts: int) -> st.SearchStrategy[str]:
    """Strings glued from metacharacters and arbitrary text."""
    return st.lists(
        st.one_of(st.sampled_from(META), st.text(max_size=part_size)), max_size=parts
    ).map("".join)
