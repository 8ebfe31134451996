"""Will it fit? The gang's needs against the queue and the nodes (``job.fit``, pure), and how
``job.fit_check`` acts on the verdict per ``fit_check`` mode (its reads are a stand-in hook
here; tests/integration/test_fit_on_cluster.py reads a real cluster)."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from airflow_volcano_wandb.exceptions import JobRefusedError, JobWontFitError
from airflow_volcano_wandb.hooks.kubernetes_api import KubernetesPermissionError
from airflow_volcano_wandb.job import fit
from airflow_volcano_wandb.job.fit_check import check_fit
from airflow_volcano_wandb.template.quantity import parse_quantity
from test_support.scripted_hook import ScriptedVolcanoHook

GPU = "nvidia.com/gpu"
GI = 1024**3


def _task(name: str, replicas: int, **resources: Any) -> dict[str, Any]:
    container = {"name": name, "image": "i", "resources": resources}
    return {"name": name, "replicas": replicas, "template": {"spec": {"containers": [container]}}}


def _job(workers: int = 2, gpus: Any = 8, min_available: int | None = None, **worker: Any):
    limits = {GPU: gpus, **worker.pop("limits", {})}
    tasks = [_task("master", 1, limits={GPU: gpus}), _task("worker", workers, limits=limits)]
    spec: dict[str, Any] = {"tasks": tasks, "queue": "default"}
    spec["minAvailable"] = 1 + workers if min_available is None else min_available
    return {"metadata": {"name": "j", "namespace": "ns"}, "spec": spec}


def _queue(capability=None, deserved=None, allocated=None, name="default") -> dict[str, Any]:
    spec = {k: v for k, v in (("capability", capability), ("deserved", deserved)) if v}
    status = {"allocated": allocated} if allocated else {}
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def _nodes(count: int = 4, gpus: int = 8, cpu: str = "64", memory: str = "512Gi"):
    allocatable = {GPU: str(gpus), "cpu": cpu, "memory": memory, "pods": "110"}
    return [
        {"metadata": {"name": f"n{i}"}, "status": {"allocatable": allocatable}}
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("16Gi", Decimal(16 * GI)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("1E", Decimal(10**18)),  # exa, not an exponent without digits
        ("2k", Decimal(2000)),
        ("1.5Ki", Decimal(1536)),
        ("100n", Decimal("1E-7")),
        (8, Decimal(8)),
        (2.5, Decimal("2.5")),
    ],
)
def test_quantities_are_read_exactly(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "8 GPUs", "1Gb", True, None, [1]])
def test_a_non_quantity_is_a_value_error(bad):
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse_quantity(bad)


def test_a_pod_needs_requests_else_limits_summed_over_containers_and_the_largest_init():
    pod = {
        "spec": {
            "containers": [
                {"resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1"}}},
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"name": "no-resources"},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4", "memory": "1Gi"}}}],
        }
    }
    assert fit.pod_needs(pod) == {"cpu": Decimal(4), "memory": Decimal(5 * GI)}


def test_the_gang_is_every_rank_by_default_and_minavailables_share_otherwise():
    assert [(t.name, t.pods) for t in fit.gang(_job(workers=3))] == [("master", 1), ("worker", 3)]
    shares = fit.gang(_job(workers=3, min_available=2))
    assert [(t.name, t.pods) for t in shares] == [("master", 1), ("worker", 1)]
    assert fit.gang_total(shares) == {GPU: Decimal(16)}


def test_more_gpus_than_the_queues_capability_never_fits():
    verdict = fit.verdict(_job(workers=2), _queue(capability={GPU: "16"}), None)
    assert verdict.never == (
        "needs 24 nvidia.com/gpu in one gang; queue 'default' is capped at 16",
    )
    assert verdict.later == ()


def test_cpu_and_memory_against_the_cap_in_their_own_units():
    job = _job(workers=1, gpus=0, limits={"cpu": "1500m", "memory": "16Gi"})
    verdict = fit.verdict(job, _queue(capability={"cpu": "1", "memory": "8Gi"}), None)
    assert verdict.never == (
        "needs 1.5 cpu in one gang; queue 'default' is capped at 1",
        "needs 16Gi memory in one gang; queue 'default' is capped at 8Gi",
    )


def test_a_queue_without_capability_caps_nothing():
    assert fit.verdict(_job(workers=100), _queue(), None) == fit.Fit()
    assert fit.verdict(_job(workers=100), _queue(capability={"cpu": "1"}), None) == fit.Fit()


def test_a_queue_with_its_capability_in_use_fits_but_not_now():
    queue = _queue(capability={GPU: "32"}, allocated={GPU: "16", "cpu": "0"})
    verdict = fit.verdict(_job(workers=2), queue, None)
    assert verdict.never == ()
    assert verdict.later == (
        "queue 'default' has 16 of its 32 nvidia.com/gpu in use and the gang needs 24: it "
        "waits until the queue has room",
    )


def test_past_the_deserved_share_is_said_but_not_refused():
    verdict = fit.verdict(_job(workers=2), _queue(deserved={GPU: "16"}), None)
    assert verdict.never == ()
    assert "past its deserved 16" in verdict.later[0]


def test_a_pod_larger_than_every_node_never_fits():
    verdict = fit.verdict(_job(workers=1, gpus=16), None, _nodes())
    assert verdict.never == (
        "one 'master' pod needs 16 nvidia.com/gpu; the largest node has 8",
        "one 'worker' pod needs 16 nvidia.com/gpu; the largest node has 8",
    )


def test_a_pod_that_needs_what_no_single_node_has_at_once_never_fits():
    nodes = [
        {"status": {"allocatable": {GPU: "8", "memory": "64Gi"}}},
        {"status": {"allocatable": {GPU: "0", "memory": "1Ti"}}},
    ]
    verdict = fit.verdict(_job(workers=1, limits={"memory": "128Gi"}), None, nodes)
    assert verdict.never == (
        "one 'worker' pod needs 128Gi memory, 8 nvidia.com/gpu; no node has all of that at once",
    )


def test_a_gang_larger_than_all_nodes_together_never_fits():
    # Each task packs, and so would five of the smallest pod (4 GPUs); 36 GPUs in all do not.
    job = _job(workers=4)
    job["spec"]["tasks"][0] = _task("master", 1, limits={GPU: 4, "cpu": "60"})
    verdict = fit.verdict(job, None, _nodes(count=4))
    assert verdict.never == ("needs 36 nvidia.com/gpu in one gang; the 4 nodes have 32 in all",)
    verdict = fit.verdict(_job(workers=4), None, _nodes(count=4))
    assert verdict.never == (
        "the gang's 5 pods each need at least 8 nvidia.com/gpu; the 4 nodes hold at most 4 such "
        "pods",
    )


def test_a_tasks_pods_that_each_fit_but_do_not_pack_never_fit():
    # 5 workers of 6 GPUs: 30 <= 32 GPUs in all, but a node of 8 holds only one of them.
    verdict = fit.verdict(_job(workers=5, gpus=6), None, _nodes(count=4))
    assert verdict.never == (
        "the gang needs 5 'worker' pods of 6 nvidia.com/gpu; the 4 nodes hold at most 4 such pods",
    )


def test_the_gangs_pods_over_all_tasks_must_pack_too():
    # 1 master + 4 workers of 6 GPUs: each task packs on its own, the five together do not.
    verdict = fit.verdict(_job(workers=4, gpus=6), None, _nodes(count=4))
    assert verdict.never == (
        "the gang's 5 pods each need at least 6 nvidia.com/gpu; the 4 nodes hold at most 4 "
        "such pods",
    )


def test_fitting_gangs_fit():
    assert fit.verdict(_job(workers=3, gpus=8), None, _nodes(count=4)) == fit.Fit()
    assert fit.verdict(_job(workers=4, gpus=4), None, _nodes(count=4)) == fit.Fit()


def test_a_fitting_job_and_unread_sides_say_nothing():
    assert fit.verdict(_job(workers=3), _queue(capability={GPU: "32"}), _nodes()) == fit.Fit()
    assert fit.verdict(_job(workers=99), None, None) == fit.Fit()
    assert fit.verdict(_job(workers=99), None, []) == fit.Fit()  # no nodes yet: autoscaler


def test_the_mode_is_one_of_three():
    for mode in fit.FIT_CHECK_MODES:
        fit.check_mode(mode)
    with pytest.raises(ValueError, match="fit_check must be one of fail, warn, off"):
        fit.check_mode("strict")


LOG = logging.getLogger("test_fit")


def test_fail_raises_a_refusal_that_names_the_numbers(caplog):
    hook = ScriptedVolcanoHook(queue=_queue(capability={GPU: "16"}), nodes=_nodes())
    with pytest.raises(JobWontFitError) as raised:
        check_fit(hook, _job(workers=2), "fail", LOG)
    assert isinstance(raised.value, JobRefusedError)  # retry policies treat it as a refusal
    assert "needs 24 nvidia.com/gpu in one gang; queue 'default' is capped at 16" in str(
        raised.value
    )
    assert "Nothing was submitted" in str(raised.value)


def test_warn_only_logs_and_off_reads_nothing(caplog):
    hook = ScriptedVolcanoHook(queue=_queue(capability={GPU: "16"}), nodes=_nodes())
    with caplog.at_level(logging.INFO, LOG.name):
        check_fit(hook, _job(workers=2), "warn", LOG)
    assert "can never be placed as things stand: needs 24 nvidia.com/gpu" in caplog.text
    idle = ScriptedVolcanoHook()
    check_fit(idle, _job(workers=2), "off", LOG)
    assert idle.reads == []


def test_not_now_is_one_log_line(caplog):
    hook = ScriptedVolcanoHook(
        queue=_queue(capability={GPU: "32"}, allocated={GPU: "24"}), nodes=_nodes()
    )
    with caplog.at_level(logging.INFO, LOG.name):
        check_fit(hook, _job(workers=1), "fail", LOG)
    assert [r.message for r in caplog.records] == [
        "Fit check: the job fits, but not now: queue 'default' has 24 of its 32 nvidia.com/gpu "
        "in use and the gang needs 16: it waits until the queue has room"
    ]


def test_unreadable_queue_and_nodes_are_said_once_and_the_job_goes_on(caplog):
    denied = KubernetesPermissionError("Kubernetes denied 'list' on 'nodes' cluster-wide")
    hook = ScriptedVolcanoHook(queue=denied, nodes=denied)
    with caplog.at_level(logging.INFO, LOG.name):
        check_fit(hook, _job(workers=99), "fail", LOG)
    assert [r.message for r in caplog.records] == [
        "Fit check: skipped what it could not read (queue 'default': not allowed to this "
        "connection; nodes: not allowed to this connection); grant the optional ClusterRole "
        "of docker/k8s/rbac-fit-check.yaml for it"
    ]


def test_the_nodes_still_judge_when_only_the_queue_is_unreadable():
    hook = ScriptedVolcanoHook(queue=ApiException(status=404, reason="Not Found"), nodes=_nodes())
    with pytest.raises(JobWontFitError, match="largest node has 8"):
        check_fit(hook, _job(workers=1, gpus=16), "fail", LOG)
    assert hook.reads == [("queue", "default"), ("nodes",)]
