"""Property-based fuzzing of ``VolcanoPyTorchJobOperator``'s parameters (hypothesis).

The renderer's own fuzzing is in ``tests/unit/template/test_template_properties.py``; this
drives the operator's whole ``execute`` with a stub task instance (no Airflow: its W&B
settings, macro assembly, overrides, labels, env injection and submission) with hostile values
for every templated parameter: strings with YAML, JSON, Jinja and macro metacharacters, huge
and negative numbers, unicode digits, wrong types.

Two of the tests put a recorder in place of the Kubernetes API (no cluster: hundreds of
examples), so they see exactly what would have been sent. The only outcomes allowed:

- an ``AirflowException`` whose message names a field it was given, and *no* API call at all
  (no Secret, no job: nothing was submitted);
- exactly one job created, of the template's shape: the same tasks, the task-instance
  labels, every hostile value present only as a string where it was put (a value never
  becomes YAML, so it cannot add fields), and JSON-serialisable.

Where any text is legal, nothing may be refused: the recorder must get it verbatim, and so must
the cluster's apiserver (the third test, fewer examples: each creates a job and reads it back).
Anything else (a ``KeyError``, ``TypeError``, ``RecursionError`` from deep inside...) fails.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL, TaskInstanceIdentity
from test_support.cluster_jobs import custom, get_job, seed_template
from test_support.hostile import hostile_text
from test_support.operator_tries import StubTaskInstance, context_for, operator

nasty = hostile_text(6, 6)
numberish = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(["3", "03", "-1", "1e3", "٣", " 2 ", "2.0", "99999999999999999999", ""]),
    nasty,
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
)
names = st.one_of(st.sampled_from(["master", "worker", "ghost", ""]), nasty)
macro_values = st.one_of(nasty, numberish, st.lists(nasty, max_size=2))
ops_kwargs = st.fixed_dictionaries(
    # The template names ${user_value}: every example gives it, else most would be refused
    # for that alone, before any fuzzed field was looked at.
    {
        "macros": st.builds(
            lambda value, more: {**more, "user_value": value},
            macro_values,
            st.dictionaries(
                st.one_of(st.sampled_from(["run_id", "image_uri"]), nasty), macro_values, max_size=2
            ),
        )
    },
    optional={
        "image_uri": st.one_of(nasty, st.none()),
        "replicas": st.one_of(st.dictionaries(names, numberish, max_size=3), nasty),
        "env": st.one_of(st.dictionaries(nasty, st.one_of(nasty, numberish), max_size=3), nasty),
        "pod_annotations": st.dictionaries(nasty, nasty, max_size=2),
        "job_name": st.one_of(nasty, st.none()),
        "namespace": st.one_of(st.sampled_from(["wandb", "team-a"]), nasty),
        "container_resources": st.dictionaries(
            names,
            st.dictionaries(
                st.sampled_from(["limits", "requests", "x"]),
                st.dictionaries(nasty, numberish, max_size=2),
                max_size=2,
            ),
            max_size=2,
        ),
        "command": st.dictionaries(names, st.lists(nasty, max_size=3), max_size=2),
        "wandb_run_name": st.one_of(nasty, st.none()),
        "wandb_entity": st.one_of(nasty, st.none()),
        "wandb_project": st.one_of(nasty, st.none()),
        "wandb_tags": st.one_of(st.lists(nasty, max_size=3), st.none()),
    },
)

TEMPLATE = seed_template()
TEMPLATE["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
    {"name": "USER_VALUE", "value": "${user_value}"}
]
TEMPLATE["metadata"].setdefault("annotations", {})["note"] = "value: ${user_value}"


# The stand-in serves no queues or nodes; the fit check has tests of its own (test_fit*).
NO_FIT_CHECK = "off"


class Recorder:
    """Stands in for the Kubernetes API: records every call; create returns the job."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def install(self, monkeypatch) -> None:
        def record(name, result=None):
            def call(hook_self, *args, **kwargs):
                self.calls.append((name, args))
                return result(*args) if callable(result) else result

            return call

        def created(body, namespace):
            job = copy.deepcopy(body)
            job["metadata"]["uid"] = "uid-1"
            return job

        monkeypatch.setattr(VolcanoHook, "list_jobs", record("list_jobs", []))
        # No earlier job's pods hold the name (the create waits them out otherwise).
        monkeypatch.setattr(VolcanoHook, "list_job_pods", record("list_job_pods", []))
        monkeypatch.setattr(VolcanoHook, "create_job", record("create_job", created))

        def created_secret(body, namespace):
            return {"metadata": {**body["metadata"], "resourceVersion": "1"}}

        monkeypatch.setattr(VolcanoHook, "create_secret", record("create_secret", created_secret))
        monkeypatch.setattr(VolcanoHook, "get_namespace", record("get_namespace", "default"))


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


# Examples are slow (a whole execute each) and share their test's recorder on purpose.
FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _fuzzed_try(recorder, kwargs: dict) -> tuple[StubTaskInstance, Exception | None]:
    """A fresh try of an operator given ``kwargs``, the recorder cleared for it, executed:
    its task instance, and the error it refused with, at the DAG's parse (``TypeError`` or
    ``ValueError``) or in ``execute`` (``None``: it submitted)."""
    recorder.calls.clear()
    ti = StubTaskInstance("avw_rel_fuzz", "train", "manual__fuzz")
    try:
        op = operator(
            template=copy.deepcopy(TEMPLATE),
            wandb_conn_id=None,
            wait_for_completion=False,
            fit_check=NO_FIT_CHECK,
            **kwargs,
        )
    except (TypeError, ValueError) as refused_at_parse:
        return ti, refused_at_parse
    try:
        op.execute(context_for(ti))
    except AirflowException as refused:
        return ti, refused
    return ti, None


@pytest.fixture
def recorder(monkeypatch):
    """A recorder in place of the hook's API calls, for one test's examples (all of them: a
    function's fixture lives through its examples), undone before the apiserver's test."""
    rec = Recorder()
    rec.install(monkeypatch)
    return rec


#: The words a refusal names each parameter by, besides its own name (the check's message).
FIELD_WORDS = {
    "macros": ("macro",),
    "image_uri": ("image",),
    "replicas": ("replica",),
    "env": ("env",),
    "pod_annotations": ("annotation",),
    "job_name": ("job_name", "job name", "metadata.name"),
    "namespace": ("namespace",),
    "container_resources": ("resources",),
    "command": ("command",),
    "wandb_run_name": ("run name",),
    "wandb_entity": ("w&b entity",),
    "wandb_project": ("w&b project",),
    "wandb_tags": ("w&b tag",),
}


@settings(FUZZ, max_examples=300)
@given(kwargs=ops_kwargs)
def test_fuzzed_params_are_recorded_in_the_templates_shape_or_refused_naming_one_with_a_stub_ti(
    recorder, kwargs
):
    ti, refused = _fuzzed_try(recorder, kwargs)
    if refused is not None:
        message = str(refused)
        assert message.strip() and len(message) < 20_000, message
        named = [k for k in kwargs if any(w in message.lower() for w in (k, *FIELD_WORDS[k]))]
        assert named, f"the refusal names none of {sorted(kwargs)}: {message}"
        assert recorder.calls == [] or all(name == "get_namespace" for name, _ in recorder.calls)
        assert ti.pushed == {}
        event(f"refused: {message.split(':')[0][:40]}")
        return

    event("submitted")
    creates = [args for name, args in recorder.calls if name == "create_job"]
    assert len(creates) == 1
    body, _ = creates[0]
    json.dumps(body)  # JSON types only
    assert set(body) <= {"apiVersion", "kind", "metadata", "spec"}
    assert body["kind"] == "Job" and body["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert [t["name"] for t in body["spec"]["tasks"]] == ["master", "worker"]
    # Only the operator's own additions: a queue, and the finished-job TTL (finished_job_ttl).
    assert set(body["spec"]) <= set(TEMPLATE["spec"]) | {"queue", "ttlSecondsAfterFinished"}
    identity = TaskInstanceIdentity("avw_rel_fuzz", "train", "manual__fuzz")
    assert body["metadata"]["labels"][IDENTITY_LABEL] == identity.digest
    for task in body["spec"]["tasks"]:
        assert set(task) <= {"name", "replicas", "template", "policies", "minAvailable"}
        assert isinstance(task["replicas"], int) and 0 <= task["replicas"] <= 1024
        pod_spec = task["template"]["spec"]
        # Only the provider's memory-backed /dev/shm joins the template's pod spec (shm_size).
        assert set(pod_spec) <= {"containers", "restartPolicy", "volumes"}
        assert [v["name"] for v in pod_spec.get("volumes", [])] in ([], ["avw-dshm"])
    # A hostile macro value lands as one string, never parsed into structure.
    user_value = (kwargs.get("macros") or {}).get("user_value")
    if isinstance(user_value, str) and user_value:
        assert any(user_value in s for s in _strings(body))
        master_env = body["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"]
        assert {"name": "USER_VALUE", "value": user_value} in master_env


env_names = st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,10}\Z").filter(
    lambda n: not n.startswith(("WANDB_", "AIRFLOW_"))
)
valid_with_hostile_text = st.fixed_dictionaries(
    {
        "macros": st.fixed_dictionaries({"user_value": nasty.filter(bool)}),
        "replicas": st.fixed_dictionaries(
            {"worker": st.one_of(st.integers(0, 64), st.integers(0, 64).map(str))}
        ),
    },
    optional={
        "env": st.dictionaries(env_names, nasty, max_size=3),
        "pod_annotations": st.dictionaries(
            st.from_regex(r"\Aexample\.com/[a-z][a-z0-9]{0,8}\Z"), nasty, max_size=2
        ),
        "command": st.fixed_dictionaries({"master": st.lists(nasty, min_size=1, max_size=3)}),
        "wandb_run_name": nasty.filter(bool),
        # W&B's own rule for a tag: 1 to 64 characters, no comma.
        "wandb_tags": st.lists(
            nasty.filter(lambda tag: 0 < len(tag) <= 64 and "," not in tag), max_size=3
        ),
    },
)


def _assert_verbatim(body: dict[str, Any], kwargs: dict[str, Any]) -> None:
    """The job carries each free-text value exactly where it was put, and no field more."""
    json.dumps(body)
    tasks = body["spec"]["tasks"]
    assert [t["name"] for t in tasks] == ["master", "worker"]
    assert tasks[1]["replicas"] == int(kwargs["replicas"]["worker"])
    master = tasks[0]["template"]["spec"]["containers"][0]
    assert {"name": "USER_VALUE", "value": kwargs["macros"]["user_value"]} in master["env"]
    for name, value in (kwargs.get("env") or {}).items():
        for task in tasks:
            env = task["template"]["spec"]["containers"][0]["env"]
            assert {"name": name, "value": value} in env
    for key, value in (kwargs.get("pod_annotations") or {}).items():
        for task in tasks:
            assert task["template"]["metadata"]["annotations"][key] == value
    if "command" in kwargs:
        assert master["command"] == kwargs["command"]["master"]


@settings(FUZZ, max_examples=200)
@given(kwargs=valid_with_hostile_text)
def test_hostile_free_text_reaches_the_recorder_verbatim_and_is_never_refused_with_a_stub_ti(
    recorder, kwargs
):
    """Where any text is legal, the text arrives as it was given, and adds no field."""
    _, refused = _fuzzed_try(recorder, kwargs)
    assert refused is None, f"a legal value was refused: {refused}"
    ((body, _),) = [args for name, args in recorder.calls if name == "create_job"]
    _assert_verbatim(body, kwargs)
    assert set(body) == {"apiVersion", "kind", "metadata", "spec"}


def _with_omitted_zeros(job: dict[str, Any]) -> dict[str, Any]:
    """The job as sent: the apiserver serves it without the fields Kubernetes omits when they
    are empty (an env var's ``value: ""``, a task's ``replicas: 0``), which mean the same."""
    job = copy.deepcopy(job)
    for task in job["spec"]["tasks"]:
        task.setdefault("replicas", 0)
        for container in task["template"]["spec"]["containers"]:
            for var in container.get("env") or []:
                if "valueFrom" not in var:
                    var.setdefault("value", "")
    return job


@pytest.mark.cluster
@settings(FUZZ, max_examples=15)
@given(kwargs=valid_with_hostile_text)
def test_hostile_free_text_is_submitted_verbatim_to_the_apiserver_with_a_stub_ti(
    kwargs, kubernetes_connection, admin, volcano_namespace
):
    """The same legal values, through the real hook: the apiserver takes the job, and the job it
    serves back holds each value as it was given."""
    run_id = f"manual__fuzz-{uuid.uuid4().hex[:8]}"  # a task instance, and so a job, per example
    ti = StubTaskInstance("avw_rel_fuzz", "train", run_id)
    op = operator(
        template=copy.deepcopy(TEMPLATE),
        namespace=volcano_namespace,
        wandb_conn_id=None,
        wait_for_completion=False,
        fit_check=NO_FIT_CHECK,
        **kwargs,
    )
    op.execute(context_for(ti))  # a refusal fails the test: every value here is legal
    ref = ti.pushed["volcano_job"]
    job = get_job(admin, volcano_namespace, ref["name"])
    try:
        assert job["metadata"]["uid"] == ref["uid"]
        identity = TaskInstanceIdentity("avw_rel_fuzz", "train", run_id)
        assert job["metadata"]["labels"][IDENTITY_LABEL] == identity.digest
        _assert_verbatim(_with_omitted_zeros(job), kwargs)
    finally:  # one job at a time on the shared cluster
        custom(admin).delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", ref["name"]
        )
