"""The operator's template policy: fail-closed by default, relaxed only by the DAG.

Rendering only (``JobRequest.render``): nothing here reaches a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.job import api_key_secret
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.template import DEFAULT_ALLOWED_SCHEDULERS
from airflow_volcano_wandb.wandb.wandb_run import SecretKeyRef
from test_support.hostile_templates import (
    CASES,
    OTHER_TASK_KEY_SECRET,
    OTHER_TEAM_SECRET,
    OWN_KEY_SECRET,
    seed,
)
from test_support.operator_tries import StubTaskInstance, context_for

IDENTITY = TaskInstanceIdentity("d", "train", "r")
OWN_KEY = OWN_KEY_SECRET


@pytest.fixture(autouse=True)
def own_key_named_as_the_corpus_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each render names a random key Secret; pinned here so a template can name it."""
    monkeypatch.setattr(api_key_secret, "fresh_ref", lambda: SecretKeyRef(OWN_KEY, "api-key"))


class KeyedWandbHook:
    """The W&B hook's connection values, with a key: the operator then owns a key Secret."""

    api_key = "k" * 40
    entity = project = base_url = None


def render(template: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    op = VolcanoPyTorchJobOperator(
        task_id="train",
        template=template,
        image_uri="registry.example.com/team-a/train:1",
        namespace="team-a",
        wandb_entity="e",
        wandb_project="p",
        **kwargs,
    )
    hook: Any = KeyedWandbHook()
    parts = OperatorParts.of(op)
    spec = parts.run.spec(context_for(StubTaskInstance("d", "train", "r")), IDENTITY, hook, 1)
    return parts.job.render(
        spec,
        hook,
        labels={},
        annotations={},
        pod_labels={},
        namespace=parts.connection.namespace,
        default_namespace=lambda: None,
    )


def mounting(secret: str) -> dict[str, Any]:
    template = seed()
    pod = template["spec"]["tasks"][1]["template"]["spec"]
    pod["volumes"] = [{"name": "key", "secret": {"secretName": secret}}]
    return template


def test_the_runs_own_key_secret_is_allowed_and_no_other_with_a_stub_ti() -> None:
    job = render(mounting(OWN_KEY))
    env = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": OWN_KEY, "key": "api-key"}}} in env  # fmt: skip
    with pytest.raises(AirflowException, match="nothing was submitted") as info:
        render(mounting(OTHER_TASK_KEY_SECRET))
    assert "spec.tasks[1].template.spec.volumes[0].secret.secretName" in str(info.value)
    assert f"Secret {OTHER_TASK_KEY_SECRET!r} is not in allowed_secrets ({OWN_KEY})" in str(
        info.value
    )


def test_wandb_api_key_secret_is_allowed_in_place_of_the_own_key_with_a_stub_ti() -> None:
    render(mounting("team-a-wandb"), wandb_api_key_secret=("team-a-wandb", "api-key"))
    with pytest.raises(AirflowException, match="allowed_secrets"):
        render(mounting(OWN_KEY), wandb_api_key_secret=("team-a-wandb", "api-key"))


def test_allowed_secrets_reaches_the_renderer_with_a_stub_ti() -> None:
    render(mounting(OTHER_TEAM_SECRET), allowed_secrets=[OTHER_TEAM_SECRET])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_hostile_template_is_refused_by_the_operators_defaults_with_a_stub_ti(
    case: Any,
) -> None:
    # No queue or priority class list by default: anything goes, as for images.
    lists = {
        "allowed_queues": ["default", "team-a"],
        "allowed_priority_classes": ["team-a-batch"],
        "allowed_secrets": [],
        "allowed_schedulers": list(DEFAULT_ALLOWED_SCHEDULERS),
    }
    kwargs: dict[str, Any] = {"macros": {"stolen_secret": OTHER_TEAM_SECRET}}
    if case.argument in ("allowed_queues", "allowed_priority_classes"):
        kwargs[case.argument] = lists[case.argument]
    with pytest.raises(AirflowException) as info:
        render(case.template(), **kwargs)
    assert case.field in str(info.value)
    render(case.template(), **{**kwargs, case.argument: [*lists[case.argument], case.value]})


def test_the_volcano_queue_parameter_is_checked_against_allowed_queues_with_a_stub_ti() -> None:
    with pytest.raises(AirflowException, match=r"spec\.queue"):
        render(seed(), volcano_queue="team-b", allowed_queues=["team-a"])
    assert render(seed(), volcano_queue="team-a", allowed_queues=["team-a"])["spec"]["queue"]


def test_the_target_volcano_comes_from_the_config_unless_the_dag_names_one_with_a_stub_ti(
    monkeypatch,
) -> None:
    """``[volcano_wandb] volcano_version`` chooses the plugins; a DAG's ``volcano_version``
    wins; a template naming a plugin the target lacks fails before submission."""
    assert "hcclrank" in render(seed())["spec"]["plugins"]  # the default: this provider's
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__VOLCANO_VERSION", "v1.11.2")
    assert "hcclrank" not in render(seed())["spec"]["plugins"]
    assert "hcclrank" in render(seed(), volcano_version="v1.13.0")["spec"]["plugins"]
    template = seed()
    template["spec"]["plugins"]["hcclrank"] = []
    with pytest.raises(AirflowException, match="nothing was submitted") as info:
        render(template)
    assert "spec.plugins.hcclrank: Volcano v1.11.2 has no hcclrank plugin" in str(info.value)
