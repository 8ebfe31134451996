"""Mask a secret in text without holding it: by a salted digest of each word.

The triggerer follows a deferred task's master log, which may print the W&B key, but the key
may not travel to it (trigger arguments are stored in the metadata database and shown in the
UI). So the task hands over a ``SecretDigest`` (a salted SHA-256 of the key, and its length;
a salt per digest) and a word of a log line with the same digest is masked. Words are read as
key characters and again as base64 characters, so a digest of an encoded form (``key_forms``)
masks it too, inside a longer word (``Basic <b64>``) as well: cheaper than decoding every
base64-looking word, which would find only whole, aligned tokens. See docs/security.md.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MASK = "***"
#: What a word is: of a key as typed, and of a base64 text (an encoded key).
_WORDS = (re.compile(r"[A-Za-z0-9_+~-]+"), re.compile(r"[A-Za-z0-9+/=]+"))


@dataclass(frozen=True)
class SecretDigest:
    """What is needed to recognise one secret, and nothing that reveals it."""

    salt: str
    sha256: str
    length: int

    @classmethod
    def of(cls, secret: str) -> SecretDigest:
        salt = secrets.token_hex(16)
        return cls(salt=salt, sha256=_digest(salt, secret), length=len(secret))

    def matches(self, text: str) -> bool:
        return len(text) == self.length and hmac.compare_digest(
            _digest(self.salt, text), self.sha256
        )

    def to_json(self) -> dict[str, Any]:
        return {"salt": self.salt, "sha256": self.sha256, "length": self.length}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SecretDigest:
        return cls(salt=str(data["salt"]), sha256=str(data["sha256"]), length=int(data["length"]))


def mask_secrets(line: str, digests: Iterable[SecretDigest]) -> str:
    """``line`` with every word (or a word's start or end) that is one of the secrets masked."""
    digests = tuple(digests)
    for words in _WORDS if digests else ():
        out, shown_up_to = [], 0
        for word in words.finditer(line):
            for span in _secret_spans(word, digests):
                out += [line[shown_up_to : span[0]], MASK]
                shown_up_to = span[1]
        line = "".join([*out, line[shown_up_to:]])
    return line


def _secret_spans(word: re.Match[str], digests: tuple[SecretDigest, ...]) -> list[tuple[int, int]]:
    text, start, end = word.group(), word.start(), word.end()
    for digest in digests:
        size = digest.length
        if size == len(text) and digest.matches(text):
            return [(start, end)]
        if size < len(text):
            spans = []
            if digest.matches(text[:size]):
                spans.append((start, start + size))
            if digest.matches(text[-size:]) and end - size >= (spans[0][1] if spans else start):
                spans.append((end - size, end))
            if spans:
                return spans
    return []


def _digest(salt: str, text: str) -> str:
    return hashlib.sha256(f"{salt}:{text}".encode()).hexdigest()
