"""What the W&B stand-in records of each request it receives."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RecordedRequest:
    """One request the stand-in received."""

    path: str
    headers: dict[str, str]
    operation: str | None
    query: str
    variables: dict[str, Any]
    status: int = 200
    told_stopped: bool = False
    """Whether the answer told the run it was stopped (a file stream's ``stopped``)."""
    received_at: float = field(default_factory=time.monotonic)
    """When it arrived (``time.monotonic``)."""

    @property
    def basic_auth_password(self) -> str | None:
        """The password of an HTTP basic ``Authorization`` header (the W&B API key)."""
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            _user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return password
