"""Masking a secret by its digest: the key is recognised in a line, and never carried."""

from __future__ import annotations

import base64
import json

import pytest

from airflow_volcano_wandb.logs.secret_digest import MASK, SecretDigest, mask_secrets
from airflow_volcano_wandb.wandb.key_forms import key_forms

KEY = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def digest() -> SecretDigest:
    return SecretDigest.of(KEY)


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        (KEY, MASK),
        (f"WANDB_API_KEY={KEY}", f"WANDB_API_KEY={MASK}"),
        (f"env: {{'WANDB_API_KEY': '{KEY}'}}", f"env: {{'WANDB_API_KEY': '{MASK}'}}"),
        (f"Authorization: Bearer {KEY}.", f"Authorization: Bearer {MASK}."),
        (f"https://api:{KEY}@wandb.example.org", f"https://api:{MASK}@wandb.example.org"),
        (f"local-{KEY}", f"local-{MASK}"),
        (f"{KEY}-suffix", f"{MASK}-suffix"),
        (f"{KEY} and again {KEY}", f"{MASK} and again {MASK}"),
        (f"{KEY}{KEY}", f"{MASK}{MASK}"),
    ],
)
def test_the_key_is_masked_wherever_a_word_is_it(digest, line, masked):
    assert mask_secrets(line, [digest]) == masked


@pytest.mark.parametrize(
    "line",
    [
        "epoch 3 loss 0.25",
        KEY[:-1] + "8",  # one character off
        KEY[:-1],  # a prefix of the key
        "x" + KEY[:-1],
        "",
    ],
)
def test_other_text_is_left_as_it_was(digest, line):
    assert mask_secrets(line, [digest]) == line


def test_no_digest_changes_nothing():
    assert mask_secrets(f"WANDB_API_KEY={KEY}", []) == f"WANDB_API_KEY={KEY}"


def test_several_secrets_are_masked(digest):
    other = "f" * 24
    line = f"a={KEY} b={other}"
    assert mask_secrets(line, [digest, SecretDigest.of(other)]) == f"a={MASK} b={MASK}"


def test_the_digest_round_trips_and_carries_no_part_of_the_key(digest):
    data = digest.to_json()
    assert SecretDigest.from_json(json.loads(json.dumps(data))) == digest
    assert KEY not in json.dumps(data)
    assert KEY[:8] not in json.dumps(data)


def test_each_digest_of_one_key_has_its_own_salt(digest):
    again = SecretDigest.of(KEY)
    assert (again.salt, again.sha256) != (digest.salt, digest.sha256)
    assert again.matches(KEY) and digest.matches(KEY)


# ---- the key's encoded forms (key_forms), masked by their digests ------------------------
B64 = base64.b64encode(KEY.encode()).decode()
BASIC = base64.b64encode(f"api:{KEY}".encode()).decode()  # what the W&B client sends


def test_the_forms_are_the_key_its_base64_and_the_clients_basic_credentials():
    assert key_forms(KEY) == (KEY, B64, BASIC)
    # Padding (and "/") are no characters of a key's words: base64 needs words of its own.
    assert B64.endswith("=") and BASIC.endswith("=")


@pytest.mark.parametrize(
    ("line", "masked"),
    [
        (f"Authorization: Basic {BASIC}", f"Authorization: Basic {MASK}"),
        (f"{{'Authorization': 'Basic {BASIC}'}}", f"{{'Authorization': 'Basic {MASK}'}}"),
        (
            f"send: b'Authorization: Basic {BASIC}\\r\\n'",
            f"send: b'Authorization: Basic {MASK}\\r\\n'",
        ),
        (f'"data": {{"api-key": "{B64}"}}', f'"data": {{"api-key": "{MASK}"}}'),
        (f"WANDB_API_KEY_BASE64={B64}", f"WANDB_API_KEY_BASE64={MASK}"),
        (f"{KEY} {B64} Basic {BASIC}", f"{MASK} {MASK} Basic {MASK}"),
        (f"path/{KEY}/x", f"path/{MASK}/x"),  # the key itself, still by its own words
    ],
)
def test_every_form_is_masked_by_its_digest(line, masked):
    digests = [SecretDigest.of(form) for form in key_forms(KEY)]
    assert mask_secrets(line, digests) == masked


def test_the_keys_digest_alone_does_not_mask_its_encodings(digest):
    """Why the task sends a digest of each form: the triggerer cannot derive them."""
    line = f"Authorization: Basic {BASIC}"
    assert mask_secrets(line, [digest]) == line
