"""``image_param``: a Trigger-form field that offers only the images the render allows."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.template import TemplateError, image_param
from airflow_volcano_wandb.template.allow_lists import image_allowed
from test_support.airflow_compat import param_validation_error


def test_exact_images_are_a_pick_list_and_the_first_is_the_default():
    param = image_param(["registry.example/ml/a:1", "registry.example/ml/b:2"])
    assert param.value == "registry.example/ml/a:1"
    assert param.schema["enum"] == ["registry.example/ml/a:1", "registry.example/ml/b:2"]
    assert param.schema["title"] == "Training image"


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/example/mlp:1.2",
        "ghcr.io/example/x",
        "evil.example/ghcr.io/example/a",
        "ghcr.io/examplE/a",
    ],
)
def test_patterns_accept_what_the_render_accepts_and_refuse_the_rest(image):
    patterns = ["ghcr.io/example/*", "registry.local/team-[ab]/trainer:?"]
    param = image_param(patterns, "ghcr.io/example/mlp:1.0", description="The image.")
    assert param.description == "The image."
    if image_allowed(image, tuple(patterns)):
        assert param.resolve(image) == image
    else:
        with pytest.raises(param_validation_error(), match="does not match"):
            param.resolve(image)


def test_a_default_outside_the_allow_list_is_refused_when_the_dag_loads():
    with pytest.raises(TemplateError, match=r"default_image 'docker.io/x:1' matches none"):
        image_param(["ghcr.io/example/*"], "docker.io/x:1")
    with pytest.raises(TemplateError, match="needs at least one image"):
        image_param([])
