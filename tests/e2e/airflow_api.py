"""Airflow's REST API as the test stacks' callers use it: a token from the simple auth
manager (every user an admin), JSON calls, a DAG run triggered, task instances cleared."""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(AssertionError):
    """An HTTP error answer of Airflow's REST API."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RestApi:
    """Calls to the API server at ``base_url`` (a property of the class it is mixed into)."""

    base_url: str
    _token: str | None = None

    def token(self) -> str:
        """A JWT from the SimpleAuthManager (all users are admins: no credentials needed)."""
        if self._token is None:
            resp = httpx.get(f"{self.base_url}/auth/token", timeout=30)
            resp.raise_for_status()
            self._token = resp.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        extra_headers = kwargs.pop("headers", {})
        resp = httpx.request(
            method,
            f"{self.base_url}/api/v2{path}",
            headers={"Authorization": f"Bearer {self.token()}", **extra_headers},
            timeout=120,  # 30 s was exceeded on a loaded machine
            **kwargs,
        )
        if resp.status_code >= 400:
            raise ApiError(resp.status_code, f"{method} {path}: {resp.status_code} {resp.text}")
        return resp.json() if resp.content else None

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any]) -> None:
        """Start a run of ``dag_id`` named ``run_id``."""
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        self.api("POST", f"/dags/{dag_id}/dagRuns", json=body)

    def clear(self, dag_id: str, run_id: str, task_ids: list[Any], **options: Any) -> Any:
        """Clear task instances of a run (their next try starts)."""
        return self.api(
            "POST",
            f"/dags/{dag_id}/clearTaskInstances",
            json={
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": task_ids,
                "only_failed": False,
                "reset_dag_runs": True,
                **options,
            },
        )
