"""The W&B API key in every form a log may show it (pure): plain (a trainer printing its env),
base64 (a Secret's ``data``) and HTTP basic auth as user ``api`` (an HTTP debug log).
"""

from __future__ import annotations

import base64

#: The user name the W&B client sends with the key as its password.
WANDB_BASIC_AUTH_USER = "api"


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def key_forms(api_key: str) -> tuple[str, ...]:
    """The key, its base64, and the base64 credentials of the W&B client's basic auth."""
    return (api_key, _base64(api_key), _base64(f"{WANDB_BASIC_AUTH_USER}:{api_key}"))
