"""The W&B API key in every form a log may show it (pure).

A trainer that prints its environment prints the key itself. A Secret's ``data`` holds it in
base64, and so do an API response and the Kubernetes client's DEBUG log of it. The W&B
client authenticates with HTTP basic auth as user ``api``, so an HTTP debug log (the trainer's
``requests``/``urllib3`` at DEBUG, a proxy's) prints ``Authorization: Basic
base64("api:" + key)``. Every masker is handed all three: Airflow's in the worker
(``hooks/wandb.py``) and the digests the triggerer masks by (``secret_digest.py``).
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
