"""Every node of every example template, and every keyword of ``render_job``, given a value of
the wrong shape: the renderer renders it or raises ``TemplateError`` naming a field (for a
keyword, that keyword), never another exception (pure).

The stages that shape a job (torchrun env, ``/dev/shm``, GPUs, gang) run before validation, so
each must step over what it cannot read and leave the naming to validation. The property test
mutates leaves at random; this walks every node, the mappings and lists too, with each shape.
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError, render_job
from test_support.template_cases import SEED
from tests.unit.template.test_template_hostile_corpus import (
    EXAMPLES,
    FIXTURE_MACROS,
    VARIABLES_SUFFIX,
)

WRONG_SHAPES: list[Any] = [
    None, "x", 3, -1, True, 1.5, [], {}, ["x"], {"a": 1}, [{"a": 1}], "${nope}", "{{nope}}",
]  # fmt: skip
# The renderer's options that add stages over the tasks' pods: elastic, and a replica override.
OPTIONS: list[dict[str, Any]] = [{}, {"elastic": (1, 3)}, {"replicas": {"worker": 2}}]


def _nodes(value: Any, path: tuple = ()) -> Iterator[tuple]:
    if path:
        yield path
    if isinstance(value, dict | list):
        for key, child in value.items() if isinstance(value, dict) else enumerate(value):
            yield from _nodes(child, (*path, key))


def _replaced(template: Any, path: tuple, value: Any) -> Any:
    copied = copy.deepcopy(template)
    node = copied
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = copy.deepcopy(value)
    return copied


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_node_of_the_wrong_shape_renders_or_raises_template_error(path: Path) -> None:
    text = path.read_text()
    template = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    variables = path.with_name(path.stem + VARIABLES_SUFFIX)
    schemas = json.loads(variables.read_text()) if variables.exists() else None
    crashes = []
    for node in _nodes(template):
        for wrong in WRONG_SHAPES:
            broken = _replaced(template, node, wrong)
            for options in OPTIONS:
                try:
                    render_job(
                        broken,
                        macros=FIXTURE_MACROS,
                        namespace="team-a",
                        template_variable_schemas=schemas,
                        **options,
                    )
                except TemplateError:
                    pass
                except Exception as error:
                    crashes.append((node, wrong, options, repr(error)))
    assert not crashes, crashes[:5]


KEYWORDS = [
    p.name
    for p in inspect.signature(render_job).parameters.values()
    if p.kind is inspect.Parameter.KEYWORD_ONLY
]
WRONG_OPTIONS: list[Any] = [
    *WRONG_SHAPES, "abc", 0, float("nan"), {"worker": "abc"}, {"master": {"a": 1}}, ("x",),
    "a: b\nc: d", object(),
]  # fmt: skip


@pytest.mark.parametrize("keyword", KEYWORDS)
def test_every_keyword_of_the_wrong_shape_renders_or_raises_template_error_naming_it(
    keyword: str,
) -> None:
    seed = yaml.safe_load(SEED.read_text())
    wrong_ones = []
    for wrong in WRONG_OPTIONS:
        arguments = {"macros": FIXTURE_MACROS, "namespace": "team-a", keyword: wrong}
        try:
            render_job(copy.deepcopy(seed), **arguments)
        except TemplateError as error:
            if keyword not in str(error):
                wrong_ones.append((wrong, str(error)))
        except Exception as error:
            wrong_ones.append((wrong, repr(error)))
    assert not wrong_ones, wrong_ones[:5]
