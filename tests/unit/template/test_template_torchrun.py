"""The torchrun env and the memory-backed /dev/shm the renderer gives PyTorch ranks (pure)."""

from __future__ import annotations

import copy

import pytest
import yaml

from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.template import DEFAULT_SHM_SIZE, TemplateError
from airflow_volcano_wandb.template.pod_security import violations
from test_support.template_cases import FIXTURES, MACROS, SEED
from test_support.template_cases import render_job as render_without_torchrun


def render_job(template=SEED, **kwargs):
    """``render_job`` of the seed with ``MACROS``, and the renderer's own torchrun defaults
    (the shared helper turns the stage off for the other stages' tests)."""
    kwargs.setdefault("macros", MACROS)
    kwargs.setdefault("torchrun_env", True)
    kwargs.setdefault("shm_size", DEFAULT_SHM_SIZE)
    return render_without_torchrun(template, **kwargs)


NODE_RANK = {"fieldRef": {"fieldPath": "metadata.annotations['hccl/rankIndex']"}}


def _containers(job, task):
    spec = next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]["spec"]
    return spec, spec["containers"]


def _env(container):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_rank_gets_the_pet_env_and_the_rank_plugin():
    job = render_job(
        replicas={"worker": 3}, resources={"worker": {"limits": {"nvidia.com/gpu": 4}}}
    )
    name = job["metadata"]["name"]
    assert job["spec"]["plugins"]["hcclrank"] == ["--master=master", "--worker=worker"]
    for task, nproc in (("master", "1"), ("worker", "4")):
        (container,) = _containers(job, task)[1]
        env = _env(container)
        assert env["PET_NNODES"] == "4"
        assert env["PET_NPROC_PER_NODE"] == nproc
        assert env["PET_MASTER_ADDR"] == f"{name}-master-0.{name}"
        assert env["PET_MASTER_PORT"] == "23456"  # the seed's --port
        assert env["PET_NODE_RANK"] == NODE_RANK


def test_a_container_keeps_pet_env_it_sets_itself_and_off_means_off():
    job = render_job(env={"PET_NPROC_PER_NODE": "8"})
    assert _env(_containers(job, "worker")[1][0])["PET_NPROC_PER_NODE"] == "8"
    plain = render_job(torchrun_env=False, shm_size=None)
    assert "hcclrank" not in plain["spec"]["plugins"]
    for task in ("master", "worker"):
        spec, (container,) = _containers(plain, task)
        assert not any(n.startswith("PET_") for n in _env(container))
        assert "volumes" not in spec


def test_pytorch_pods_get_a_memory_dev_shm_of_the_asked_size():
    job = render_job(shm_size="8Gi")
    for task in ("master", "worker"):
        spec, (container,) = _containers(job, task)
        assert spec["volumes"] == [
            {"name": "avw-dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
        ]
        assert {"name": "avw-dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        # Every Pod Security Standards level accepts it.
        for level in ("baseline", "restricted"):
            assert not [p for p in violations({"spec": spec}, (), level) if "volumes" in p[0]]


def test_a_template_dev_shm_is_kept_and_a_name_clash_is_an_error_naming_the_field():
    seed = yaml.safe_load(SEED.read_text())
    own = copy.deepcopy(seed)
    for task in own["spec"]["tasks"]:
        spec = task["template"]["spec"]
        spec["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm/"}]
    job = render_job(own)
    assert [v["name"] for v in _containers(job, "worker")[0]["volumes"]] == ["shm"]

    clash = copy.deepcopy(seed)
    clash["spec"]["tasks"][1]["template"]["spec"]["volumes"] = [{"name": "avw-dshm"}]
    with pytest.raises(TemplateError, match=r"spec\.tasks\[1\]\.template\.spec\.volumes"):
        render_job(clash)
    with pytest.raises(TemplateError, match="shm_size"):
        render_job(shm_size="")


def test_jobs_without_the_pytorch_plugin_are_left_alone():
    extra = {"epochs": 3, "lr": 0.001, "batch_size": 64, "np": 3, "shards": 4}
    job = render_job(FIXTURES / "plain-tasks.json", macros={**MACROS, **extra})
    assert "PET_NNODES" not in repr(job) and "avw-dshm" not in repr(job)


_ROLES = ("master", "worker")


def _nproc_and_world(job):
    """Each role's ``PET_NPROC_PER_NODE`` and the world size the job's facts report."""
    nproc = {task: _env(_containers(job, task)[1][0])["PET_NPROC_PER_NODE"] for task in _ROLES}
    return nproc, JobFacts.from_job(job).world_size


@pytest.mark.parametrize(
    ("gpus", "nproc", "world_size"),
    [(None, "1", 4), (1, "1", 4), ("8", "8", 32)],  # 4 ranks; "8" as a trigger form sends it
)
def test_every_rank_starts_one_process_per_gpu_and_the_world_counts_them(gpus, nproc, world_size):
    limits = {"limits": {"nvidia.com/gpu": gpus}}
    job = render_job(replicas={"worker": 3}, resources={t: limits for t in _ROLES})
    assert _nproc_and_world(job) == ({"master": nproc, "worker": nproc}, world_size)


def test_a_template_nproc_is_what_the_world_counts():
    job = render_job(
        replicas={"worker": 2},
        resources={"worker": {"limits": {"amd.com/gpu": 4}}},
        env={"PET_NPROC_PER_NODE": "gpu"},  # torchrun counts the pod's GPUs itself
    )
    assert _nproc_and_world(job) == ({"master": "gpu", "worker": "gpu"}, 1 + 2 * 4)
    plain = render_job(resources={"worker": {"limits": {"nvidia.com/gpu": 8}}})
    plain_off = render_job(
        resources={"worker": {"limits": {"nvidia.com/gpu": 8}}}, torchrun_env=False
    )
    # No PET env: the plugin's one process per pod, whatever the pod's GPUs.
    assert JobFacts.from_job(plain).world_size == 9
    assert JobFacts.from_job(plain_off).world_size == 2


@pytest.mark.parametrize("gpus", ["500m", "1.5", "2Gi"])
def test_a_gpu_limit_that_is_not_whole_gpus_is_an_error_naming_it(gpus):
    with pytest.raises(TemplateError) as refused:
        render_job(resources={"worker": {"limits": {"nvidia.com/gpu": gpus}}})
    assert refused.value.problems == (
        (
            'spec.tasks[1].template.spec.containers[0].resources.limits["nvidia.com/gpu"]',
            f"must be a whole number of GPUs, found {gpus!r}",
        ),
    )


@pytest.mark.parametrize("nproc", ["0", "-2", "eight", "8 GPUs", ""])
def test_a_pet_nproc_torchrun_cannot_start_is_an_error_naming_it(nproc):
    with pytest.raises(TemplateError) as refused:
        render_job(env={"PET_NPROC_PER_NODE": nproc})
    paths = [path for path, _ in refused.value.problems]
    assert paths == [f"spec.tasks[{i}].template.spec.containers[0].env[0].value" for i in (0, 1)]
    assert "PET_NPROC_PER_NODE must be a positive number of processes" in str(refused.value)


@pytest.mark.parametrize("task", [0, 1])
@pytest.mark.parametrize(
    ("template", "field", "found"),
    [
        ("oops", "template", "found str 'oops'"),
        (["x"], "template", "found list"),
        (None, "template", "found NoneType"),
        ({"spec": "x"}, "template.spec", "found str 'x'"),
    ],
)
def test_a_rank_whose_pod_template_is_not_a_mapping_is_refused_naming_it(
    task, template, field, found
):
    """The torchrun and /dev/shm stages run before validation: they step over a malformed pod
    template so that validation names it, instead of an AttributeError from the stage."""
    broken = yaml.safe_load(SEED.read_text())
    broken["spec"]["tasks"][task]["template"] = template
    with pytest.raises(TemplateError) as error:
        render_job(broken)
    assert f"spec.tasks[{task}].{field}: must be a mapping" in str(error.value)
    assert found in str(error.value)
