"""How the Volcano hook waits before retrying a throttled (429) or unavailable (503) call."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_volcano_wandb.hooks.kubernetes_api import RETRY_AFTER_MAX, retry_after_seconds


def _answer(cls, status: int, headers: dict | None):
    exc = cls(status=status, reason="Too Many Requests")
    exc.headers = headers
    return exc


@pytest.mark.parametrize("cls", [ApiException, AsyncApiException])
@pytest.mark.parametrize(
    ("header", "expected"),
    [("2", 2.0), ("0", 0.0), ("-5", 0.0), ("1.5", 1.5), ("86400", RETRY_AFTER_MAX)],
)
def test_retry_after_is_honoured_up_to_a_cap(cls, header, expected):
    assert retry_after_seconds(_answer(cls, 429, {"Retry-After": header})) == expected


@pytest.mark.parametrize(
    "exc",
    [
        _answer(ApiException, 503, None),
        _answer(ApiException, 503, {}),
        _answer(ApiException, 429, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}),
        ConnectionResetError("reset"),
        None,
    ],
)
def test_no_usable_retry_after_means_our_own_backoff(exc):
    assert retry_after_seconds(exc) == 0.0


def test_a_refused_permission_is_never_retried_and_a_slow_call_is():
    from airflow_volcano_wandb.hooks.kubernetes_api import (
        RETRY_BUDGET,
        SYNC_CALL_TIMEOUT,
        KubernetesPermissionError,
        is_transient,
    )

    assert not is_transient(KubernetesPermissionError("denied"))
    assert is_transient(TimeoutError()) and is_transient(ConnectionResetError())
    assert SYNC_CALL_TIMEOUT[1] < RETRY_BUDGET  # a timed-out call gets another try
