"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1e3``, ``8``): checked, and read as
exact numbers (pure)."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from airflow_volcano_wandb.template.errors import Path, error_at
from airflow_volcano_wandb.template.values import has_wide_int, show

# Kubernetes resource.Quantity, as the CRD's OpenAPI schema spells it.
QUANTITY = re.compile(
    r"(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?\Z"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def check_quantity(value: Any, path: Path) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise error_at(path, f"a quantity must be a number or a string, got {show(value)}")
    if isinstance(value, str) and not QUANTITY.match(value):
        raise error_at(path, f"{value!r} is not a Kubernetes quantity (e.g. 500m, 2Gi, 1)")
    if not isinstance(value, str) and (
        (isinstance(value, float) and not math.isfinite(value)) or value < 0 or has_wide_int(value)
    ):
        raise error_at(path, f"a quantity must be a finite number >= 0, got {show(value)}")


def parse_quantity(value: Any) -> Decimal:
    """The quantity's exact value (``"500m"`` is 0.5, ``"16Gi"`` 16 * 2**30, ``"1e3"`` 1000).

    Decimal, not float: memory in bytes and CPU in millicores add up without rounding.
    Raises ``ValueError`` for anything that is not a quantity.
    """
    valid = not isinstance(value, bool) and isinstance(value, int | float | str)
    match = QUANTITY.match(str(value)) if valid else None
    if match is None:
        raise ValueError(f"{show(value)} is not a Kubernetes quantity")
    number = Decimal(match.group(2)) * (-1 if match.group(1) == "-" else 1)
    suffix = match.group(6) or ""
    if suffix in _BINARY:
        return number * Decimal(1024) ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number * Decimal(10) ** Decimal(suffix[1:])  # an exponent: e3, E-2
