"""A job names only plugins its target Volcano release has (pure: the table, parsing, render)."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.template import DEFAULT_VOLCANO_VERSION, TemplateError
from airflow_volcano_wandb.template.plugins import (
    OLDEST_SUPPORTED,
    PLUGIN_SINCE,
    VersionError,
    parse_version,
    plugins_in,
    target_version,
)
from airflow_volcano_wandb.versions import VOLCANO_VERSION
from test_support.template_cases import MACROS, SEED, render_job


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("v1.14.1", (1, 14, 1)),
        ("1.12.3", (1, 12, 3)),
        ("v1.13", (1, 13, 0)),
        (" 1.7.0 ", (1, 7, 0)),
    ],
)
def test_versions_parse_with_or_without_v_and_patch(text, version):
    assert parse_version(text) == version


@pytest.mark.parametrize("text", ["latest", "1", "v1.14.1-rc.1", "1.14.1+build", "v1.x.0", ""])
def test_anything_else_is_not_a_version(text):
    with pytest.raises(VersionError, match="is not a Volcano version"):
        parse_version(text)


def test_targets_older_than_the_pytorch_plugin_are_refused():
    assert target_version("v1.7.0") == OLDEST_SUPPORTED
    with pytest.raises(VersionError, match=r"v1\.6\.9 is older than .* v1\.7\.0"):
        target_version("1.6.9")


@pytest.mark.parametrize(
    ("version", "has_hcclrank", "has_ray"),
    [
        ((1, 7, 0), False, False),
        ((1, 12, 2), False, False),
        ((1, 12, 3), True, False),  # backported to 1.12's patch releases
        ((1, 13, 0), True, True),
        ((1, 14, 1), True, True),
    ],
)
def test_plugins_by_release(version, has_hcclrank, has_ray):
    found = plugins_in(version)
    assert {"ssh", "env", "svc", "tensorflow", "mpi", "pytorch"} <= found
    assert ("hcclrank" in found, "ray" in found) == (has_hcclrank, has_ray)


def test_the_default_target_is_the_local_clusters_release_and_has_every_plugin():
    assert DEFAULT_VOLCANO_VERSION == VOLCANO_VERSION
    assert plugins_in(parse_version(VOLCANO_VERSION)) == set(PLUGIN_SINCE)


def _torchrun_job(**kwargs):
    return render_job(SEED, macros=MACROS, torchrun_env=True, **kwargs)


def _node_rank_env(job):
    return [
        e
        for t in job["spec"]["tasks"]
        for c in t["template"]["spec"]["containers"]
        for e in c.get("env", [])
        if e["name"] == "PET_NODE_RANK"
    ]


def test_an_older_target_gets_no_rank_plugin_and_no_node_rank_env():
    old = _torchrun_job(volcano_version="v1.12.2")
    assert set(old["spec"]["plugins"]) == {"pytorch"}
    assert _node_rank_env(old) == []
    new = _torchrun_job(volcano_version="v1.12.3")
    assert "hcclrank" in new["spec"]["plugins"]
    assert len(_node_rank_env(new)) == 2  # the master's container and the worker's


def test_a_template_naming_a_plugin_its_target_lacks_is_an_error_at_that_plugin():
    template = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "plugins": {"pytorch": ["--port=23456"], "hcclrank": [], "ray": []},
            "tasks": [
                {
                    "name": "master",
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
                }
            ],
        },
    }
    with pytest.raises(TemplateError) as raised:
        render_job(template, macros=MACROS, volcano_version="1.11.2")
    assert [path for path, _ in raised.value.problems] == [
        "spec.plugins.hcclrank",
        "spec.plugins.ray",
    ]
    assert "Volcano v1.11.2 has no hcclrank plugin (it came in v1.12.3)" in str(raised.value)
    render_job(template, macros=MACROS, volcano_version="1.13.0")  # both exist there


def test_no_target_is_the_release_the_provider_is_tested_with():
    """One default for render_job and the operator (issue 52): ``None``, which the operator
    reads as ``[volcano_wandb] volcano_version`` and render_job as :data:`VOLCANO_VERSION`."""
    default = render_job(SEED, macros=MACROS)
    assert render_job(SEED, macros=MACROS, volcano_version=None) == default
    assert render_job(SEED, macros=MACROS, volcano_version=VOLCANO_VERSION) == default


@pytest.mark.parametrize("bad", ["v1.6.0", "newest", ""])
def test_a_bad_target_is_an_error_naming_the_parameter(bad):
    with pytest.raises(TemplateError) as raised:
        render_job(SEED, macros=MACROS, volcano_version=bad)
    assert raised.value.path == "volcano_version"
