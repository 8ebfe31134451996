"""Airflow Trigger-form fields from what the renderer enforces: a queue's template variables
and an image allow-list, so the form refuses what the render would refuse.

The JSON schemas are computed by pure code; only the two public builders, called from DAG
files, import Airflow's ``Param``, when called, so ``template/`` still loads without Airflow.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.template.allow_lists import as_allow_list, image_allowed
from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.template_variables import param_specs

if TYPE_CHECKING:
    from airflow.sdk import Param

_WILDCARDS = re.compile(r"[*?\[]")
_REGEX_SYNTAX = frozenset("\\^$.|+()[]{}/")


def params_from_template_variables(schemas: Sequence[Any]) -> dict[str, Param]:
    """One Airflow ``Param`` per template variable, by name: W&B's schemas (the list
    ``wandb.Api().run_queue(entity, name).template_variables`` returns) as the form's
    ``type``, ``minimum``, ``maximum``, ``enum``, ``default`` and ``description``, so the
    Trigger form enforces the queue's own bounds.

    :raises TemplateError: for a schema the renderer would refuse too.
    """
    from airflow.sdk import Param  # at call time: see the module's docstring

    return {name: Param(**spec) for name, spec in param_specs(schemas).items()}


def _as_regex(pattern: str) -> str:
    """An fnmatch pattern (``*``, ``?``, ``[...]``) as a regex that Python and a browser read
    alike: only regex syntax characters are escaped (a browser refuses other escapes)."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        end = pattern.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif end > 0:  # a character class, "[!...]" negated as in fnmatch
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        else:
            out.append("\\" + char if char in _REGEX_SYNTAX else char)
        i += 1
    return "".join(out)


def image_param_spec(
    allowed_images: Sequence[str], default_image: str | None = None
) -> dict[str, Any]:
    """The JSON schema of an image field limited to ``allowed_images`` (``render_job``'s
    fnmatch patterns): a pick-list when every entry is an exact image, else text that must
    match one of the patterns. ``default_image``: the field's first value (by default the first
    allowed image), which must be allowed itself."""
    patterns = as_allow_list(allowed_images, "allowed_images") or ()
    if not patterns:
        raise error_at(("allowed_images",), "needs at least one image or pattern")
    exact = not any(_WILDCARDS.search(image) for image in patterns)
    if default_image is None and exact:
        default_image = patterns[0]
    if default_image is None or not image_allowed(default_image, patterns):
        raise error_at(
            ("image_param",),
            f"default_image {default_image!r} matches none of allowed_images {list(patterns)}: "
            "the form's first value must be an allowed image",
        )
    common = {"default": default_image, "type": "string", "title": "Training image"}
    if exact:
        return {**common, "enum": list(patterns)}
    choices = "|".join(_as_regex(image) for image in patterns)
    return {**common, "minLength": 1, "pattern": f"^(?:{choices})$"}


def image_param(
    allowed_images: Sequence[str], default_image: str | None = None, **extra: Any
) -> Param:
    """An Airflow ``Param`` for a training image from an allow-list (:func:`image_param_spec`);
    ``extra`` adds or replaces keys (``description``, ``title``). Give the operator the same
    ``allowed_images``: the form is a convenience, the render is the check."""
    from airflow.sdk import Param  # at call time: see the module's docstring

    return Param(**{**image_param_spec(allowed_images, default_image), **extra})
