"""A tiny Kubernetes REST client for the harness itself.

The harness only creates a handful of objects and polls a few, so the standard library is
enough; that keeps ``up`` fast to import and independent of the ``kubernetes`` package.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Kube:
    """Admin-certificate client for one apiserver."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        self.server = server.rstrip("/")
        self._ctx = ssl.create_default_context(cafile=str(ca))
        self._ctx.load_cert_chain(str(cert), str(key))

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float = 10.0,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                text = json.loads(text).get("message", text)
            raise KubeError(err.code, text) from None
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            return {"raw": raw.decode(errors="replace")}

    def get(self, path: str, **kw: Any) -> dict[str, Any]:
        return self.request("GET", path, **kw)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        try:
            return self.get(path)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def create(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POST, treating "already exists" as success (``up`` may run twice on one etcd)."""
        try:
            return self.request("POST", collection, obj)
        except KubeError as err:
            if err.status == 409:
                return {}
            raise

    def apply(self, collection: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create, or replace the existing object of that name."""
        try:
            return self.request("POST", collection, obj)
        except KubeError as err:
            if err.status != 409:
                raise
        path = f"{collection}/{obj['metadata']['name']}"
        current = self.get(path)
        obj = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "resourceVersion": current["metadata"]["resourceVersion"],
            },
        }
        return self.request("PUT", path, obj)

    def text(self, path: str, timeout: float = 5.0) -> str:
        req = urllib.request.Request(self.server + path)
        with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
            return resp.read().decode(errors="replace")

    def watch(self, path: str, resource_version: str = "") -> Iterator[dict[str, Any]]:
        """Yield watch events until the server ends the stream (callers re-list and re-watch)."""
        sep = "&" if "?" in path else "?"
        url = f"{self.server}{path}{sep}watch=1&allowWatchBookmarks=false"
        if resource_version:
            url += f"&resourceVersion={resource_version}"
        req = urllib.request.Request(url)
        with urllib.request.urlopen(req, context=self._ctx, timeout=330) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)
