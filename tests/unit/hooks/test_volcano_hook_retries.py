"""How the Volcano hook waits before retrying a throttled (429) or unavailable (503) call, and
what a Secret create's 409 after a retry says."""

from __future__ import annotations

from types import SimpleNamespace

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


@pytest.mark.parametrize(
    ("first", "maybe_ours"),
    [
        (None, False),  # the first attempt's 409: someone else's Secret
        (_answer(ApiException, 429, {"Retry-After": "0"}), False),  # throttled: never handled
        (_answer(ApiException, 503, None), True),  # a gateway's 503: maybe applied
        (ConnectionResetError("reset"), True),  # the answer lost
    ],
)
def test_a_secret_create_says_whether_its_409_may_be_its_own(monkeypatch, first, maybe_ours):
    from airflow_volcano_wandb.hooks.kubernetes_api import SecretExistsError
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

    answers = [a for a in (first, ApiException(status=409, reason="Conflict")) if a is not None]

    def call(self, verb, resource, namespace, fn, *args, **kwargs):
        raise answers.pop(0)

    monkeypatch.setattr(VolcanoHook, "_call", call)
    monkeypatch.setattr(VolcanoHook, "api_client", SimpleNamespace(call_api=None))
    hook = VolcanoHook(conn_id=None)
    with pytest.raises(SecretExistsError) as taken:
        hook.create_secret({"metadata": {"name": "avw-wandb-key-x"}}, "ns")
    assert taken.value.maybe_ours is maybe_ours
    assert answers == []
