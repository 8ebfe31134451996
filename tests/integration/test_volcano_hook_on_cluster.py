"""The hook's uid-guarded annotation patch on the real apiserver.

Marking a job reported (or adopted) must touch only the submission it names: a job recreated
under the same name by a newer try is another intent's, and a patch meant for the old one must
leave it alone. The guard is the apiserver's, so only the real one can show it holds.
"""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from test_support.cluster_jobs import custom, submit_job, wait_until

pytestmark = pytest.mark.cluster

KEY = "example.org/reported-by-try"


def test_the_annotation_lands_on_the_named_submission(kubernetes_connection, volcano_namespace):
    hook = VolcanoHook()
    job = submit_job(hook.api_client, volcano_namespace, "annotated", master_seconds=600)
    uid = job["metadata"]["uid"]

    patched = hook.set_job_annotations("annotated", volcano_namespace, uid, {KEY: "2"})

    assert patched is not None
    assert patched["metadata"]["uid"] == uid
    assert hook.get_job("annotated", volcano_namespace)["metadata"]["annotations"][KEY] == "2"


def test_a_job_recreated_under_the_name_is_left_alone(kubernetes_connection, volcano_namespace):
    hook = VolcanoHook()
    old = submit_job(hook.api_client, volcano_namespace, "recreated", master_seconds=600)
    custom(hook.api_client).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", "recreated"
    )
    wait_until(lambda: hook.get_job("recreated", volcano_namespace) is None, 60, what="deleted")
    new = submit_job(hook.api_client, volcano_namespace, "recreated", master_seconds=600)

    patched = hook.set_job_annotations(
        "recreated", volcano_namespace, old["metadata"]["uid"], {KEY: "1"}
    )

    assert patched is None
    current = hook.get_job("recreated", volcano_namespace)
    assert current["metadata"]["uid"] == new["metadata"]["uid"]
    assert KEY not in (current["metadata"].get("annotations") or {})


def test_a_gone_submission_answers_none(kubernetes_connection, volcano_namespace):
    hook = VolcanoHook()

    assert hook.set_job_annotations("never-made", volcano_namespace, "0000", {KEY: "1"}) is None
