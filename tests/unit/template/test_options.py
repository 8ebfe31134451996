"""``template/options.py`` and ``render.RENDER``: ``render_job``'s keywords are declared once,
on their groups, and its signature, its docs and its checks are read off them."""

from __future__ import annotations

import inspect

import pytest

from airflow_volcano_wandb.template import TemplateError, render_job
from airflow_volcano_wandb.template.options import options_of
from airflow_volcano_wandb.template.render import OPTIONS, RENDER
from airflow_volcano_wandb.template.shaping import Shaping
from test_support.template_cases import MACROS, SEED


def test_each_keyword_is_declared_on_one_group_and_documented_on_render_job():
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    assert list(inspect.signature(render_job).parameters) == ["template", "macros", *names]
    undocumented = [
        n for n in ["template", "macros", *names] if f":param {n}:" not in render_job.__doc__
    ]
    assert undocumented == []
    assert sum(len(options_of(group)) for group in RENDER) == len(OPTIONS)


def test_render_jobs_own_def_writes_out_only_the_template_and_the_macros():
    code = render_job.__code__
    assert code.co_varnames[: code.co_argcount + code.co_kwonlyargcount] == ("template", "macros")


def test_an_unknown_keyword_is_refused_as_python_refuses_one():
    with pytest.raises(TypeError, match="unexpected keyword argument 'replica'"):
        render_job(SEED, macros=MACROS, replica={"worker": 2})


def test_a_group_checks_its_options_in_order_as_it_is_built():
    with pytest.raises(TemplateError, match="add_master_policy: must be True or False"):
        Shaping(add_master_policy="yes")
    with pytest.raises(TemplateError, match="volcano_version"):
        Shaping(volcano_version="1.2")
    assert Shaping(volcano_version="1.13").target[:2] == (1, 13)
