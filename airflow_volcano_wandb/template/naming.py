"""Deterministic, Kubernetes-valid names for Volcano jobs, labels and pods (pure).

Every rewrite is deterministic (same input, same output, everywhere) so that an Airflow retry
computes the *same* job name and reattaches to the job it already created. The rules, from
Kubernetes and Volcano v1.14.1 (:mod:`.versions`): pod names, hostnames and task names are
DNS-1123 labels (``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, at most 63); job names are DNS-1035 labels
(a letter first), since Volcano's ``svc`` plugin names a Service after the job; Volcano names
pods ``<job>-<task>-<index>``, so ``len(job) + 1 + len(task) + 1 + len(str(replicas - 1))
<= 63``; a label value is empty or ``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?``, at most 63.
A value that had to change ends in ``-`` and the first :data:`HASH_LENGTH` hex digits of the
SHA-256 of the *original* value, so two inputs never collapse onto one name; a valid value is
returned unchanged.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
LABEL_VALUE_MAX_LENGTH = 63
HASH_LENGTH = 8

#: Upper bound on a task's replicas accepted by the template renderer (configurable there).
DEFAULT_MAX_REPLICAS = 1024
#: Digits of the largest pod index under the default bound (index 1023 -> 4 digits).
POD_INDEX_DIGITS = len(str(DEFAULT_MAX_REPLICAS - 1))
#: Task-name length that :data:`MAX_JOB_NAME_LENGTH` reserves room for. ``master``, ``worker``,
#: ``chief``, ``replica``, ``launcher`` and ``evaluator`` all fit.
TASK_NAME_BUDGET = 12
#: Longest job name for which every pod ``<job>-<task>-<index>`` is a valid 63-character
#: label, given task names of at most :data:`TASK_NAME_BUDGET` characters and at most
#: :data:`DEFAULT_MAX_REPLICAS` replicas per task: ``63 - 1 - 12 - 1 - 4 = 45``. Use it when
#: the template is not known yet; :func:`max_job_name_length` gives the exact budget of a
#: given template, and the renderer enforces that one.
MAX_JOB_NAME_LENGTH = (
    DNS1123_LABEL_MAX_LENGTH - len("-") - TASK_NAME_BUDGET - len("-") - POD_INDEX_DIGITS
)

_DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*\Z"
)
_DNS1035_LABEL = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")
_NOT_DNS = re.compile(r"[^a-z0-9]+")
_NOT_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]+")
_LABEL_VALUE_EDGE = "-_."
# The shortest readable prefix worth keeping in front of a hash: one character and a dash.
_MIN_HASHED_LENGTH = HASH_LENGTH + 2


def short_hash(value: str, length: int = HASH_LENGTH) -> str:
    """Return the first ``length`` hex digits of the SHA-256 of ``value`` (UTF-8)."""
    # surrogatepass: arbitrary Python text (e.g. from a form) must hash, not raise.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _matches(pattern: re.Pattern[str], value: object, max_length: int) -> bool:
    """True when ``value`` is a string of at most ``max_length`` characters, all of it matched
    by ``pattern`` (each pattern needs at least one character)."""
    return isinstance(value, str) and len(value) <= max_length and pattern.match(value) is not None


def is_dns1123_label(value: object) -> bool:
    """True when ``value`` is a string that is a valid DNS-1123 label (<= 63 characters)."""
    return _matches(_DNS1123_LABEL, value, DNS1123_LABEL_MAX_LENGTH)


def is_dns1035_label(value: object) -> bool:
    """True when ``value`` is a valid DNS-1035 label: a DNS-1123 label starting with a letter."""
    return _matches(_DNS1035_LABEL, value, DNS1123_LABEL_MAX_LENGTH)


def is_dns1123_subdomain(value: object) -> bool:
    """True when ``value`` is a valid DNS-1123 subdomain (dot-separated labels, <= 253)."""
    return _matches(_DNS1123_SUBDOMAIN, value, DNS1123_SUBDOMAIN_MAX_LENGTH)


def is_label_value(value: object) -> bool:
    """True when ``value`` is a valid Kubernetes label value (may be empty, <= 63)."""
    return value == "" or _matches(_LABEL_VALUE, value, LABEL_VALUE_MAX_LENGTH)


def is_qualified_name(value: object) -> bool:
    """True when ``value`` is a valid label or annotation key: ``[prefix/]name``.

    ``prefix`` is a DNS-1123 subdomain; ``name`` is 1-63 characters of ``[-A-Za-z0-9_.]``
    starting and ending with an alphanumeric character.
    """
    if not isinstance(value, str):
        return False
    prefix, slash, name = value.rpartition("/")
    if slash and not is_dns1123_subdomain(prefix):
        return False
    return _matches(_LABEL_VALUE, name, LABEL_VALUE_MAX_LENGTH)


def _check_max_length(max_length: int) -> None:
    if not isinstance(max_length, int) or isinstance(max_length, bool):
        raise TypeError(f"max_length must be an int, not {type(max_length).__name__}")
    if not _MIN_HASHED_LENGTH <= max_length <= DNS1123_LABEL_MAX_LENGTH:
        raise ValueError(
            f"max_length must be between {_MIN_HASHED_LENGTH} and "
            f"{DNS1123_LABEL_MAX_LENGTH}, got {max_length}"
        )


def _with_hash(readable: str, digest: str, max_length: int, edge: str = "-") -> str:
    """Join a readable prefix and a hash so that the result has at most ``max_length`` chars."""
    readable = readable[: max_length - HASH_LENGTH - 1].rstrip(edge)
    return f"{readable}-{digest}" if readable else digest


def _dns_readable(value: str, *, letter_first: bool) -> str:
    readable = _NOT_DNS.sub("-", value.lower()).strip("-")
    # A hash alone may start with a digit, so a DNS-1035 result always keeps a letter in front.
    if letter_first and not readable[:1].isalpha():
        readable = f"x{readable}"
    return readable


def _dns_label(value: str, max_length: int, *, letter_first: bool) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, not {type(value).__name__}")
    _check_max_length(max_length)
    valid = is_dns1035_label(value) if letter_first else is_dns1123_label(value)
    if valid and len(value) <= max_length:
        return value
    readable = _dns_readable(value, letter_first=letter_first)
    return _with_hash(readable, short_hash(value), max_length)


def dns1123_label(value: str, max_length: int = DNS1123_LABEL_MAX_LENGTH) -> str:
    """Return ``value`` as a DNS-1123 label of at most ``max_length`` (10..63) characters.

    A valid value that fits is returned unchanged. Otherwise it is lowercased, every run of
    characters outside ``[a-z0-9]`` becomes one ``-``, leading/trailing dashes go, the rest
    is cut to fit, and ``-<hash>`` of the original value is appended. An input with no usable
    character becomes just the hash.

    >>> dns1123_label("train-mlp")
    'train-mlp'
    >>> dns1123_label("Train_MLP")
    'train-mlp-d256838d'
    """
    return _dns_label(value, max_length, letter_first=False)


def dns1035_label(value: str, max_length: int = DNS1123_LABEL_MAX_LENGTH) -> str:
    """Like :func:`dns1123_label` but the result starts with a letter (an ``x`` is prepended
    when the sanitised value would start with a digit or be empty). Use it for names that
    become Service names, i.e. Volcano job names."""
    return _dns_label(value, max_length, letter_first=True)


def label_value(value: str) -> str:
    """Return ``value`` as a valid Kubernetes label value (<= 63 characters).

    A valid value is returned unchanged (case is kept: label values may use uppercase).
    Otherwise every run of characters outside ``[-A-Za-z0-9_.]`` becomes ``-``, the ends are
    trimmed to alphanumerics, the rest is cut to fit and ``-<hash>`` of the original value is
    appended; a value with no usable character becomes just the hash.

    >>> label_value("my-project")
    'my-project'
    >>> label_value("manual__2025-01-01T00:00:00+00:00")
    'manual__2025-01-01T00-00-00-00-00-31d00d8e'
    """
    if not isinstance(value, str):
        raise TypeError(f"expected a str, not {type(value).__name__}")
    if is_label_value(value):
        return value
    readable = _NOT_LABEL_VALUE.sub("-", value).strip(_LABEL_VALUE_EDGE)
    return _with_hash(readable, short_hash(value), LABEL_VALUE_MAX_LENGTH, _LABEL_VALUE_EDGE)


def job_name(*parts: str | int, max_length: int = MAX_JOB_NAME_LENGTH) -> str:
    """Build a deterministic Volcano job name from identifying parts.

    Meant for ``job_name(dag_id, task_id, run_id, map_index)``: the result is a DNS-1035 label
    of at most ``max_length`` characters, made of the sanitised parts joined by ``-`` and
    *always* followed by ``-<hash>`` of the exact parts. The hash is unconditional because
    joining already loses information (``("a-b", "c")`` and ``("a", "b-c")`` read the same),
    and the name must differ for every distinct run while staying equal across retries.
    """
    if not parts:
        raise ValueError("job_name() needs at least one part")
    texts = []
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, str | int):
            raise TypeError(f"job_name() parts must be str or int, not {type(part).__name__}")
        texts.append(str(part))
    _check_max_length(max_length)
    readable = _dns_readable("-".join(texts), letter_first=True)
    # The unit separator cannot occur in dag/task/run ids, so the hashed text is unambiguous.
    return _with_hash(readable, short_hash("\x1f".join(texts)), max_length)


def max_job_name_length(task_names: Iterable[str], max_replicas: int = DEFAULT_MAX_REPLICAS) -> int:
    """Longest job name whose pods ``<job>-<task>-<index>`` are all valid DNS-1123 labels.

    ``max_replicas`` bounds the index (``max_replicas - 1``), so the budget does not change
    when a run scales a task within the bound, and the job name stays stable across runs with
    different replica counts. The result is capped at 63 and may be < 1 when a task name is
    itself too long.
    """
    longest = max((len(name) for name in task_names), default=0)
    index_digits = len(str(max(max_replicas - 1, 0)))
    budget = DNS1123_LABEL_MAX_LENGTH - len("-") - longest - len("-") - index_digits
    return min(budget, DNS1123_LABEL_MAX_LENGTH)


def fit_job_name(
    name: str, task_names: Iterable[str], max_replicas: int = DEFAULT_MAX_REPLICAS
) -> str:
    """Return ``name`` unchanged if it is a DNS-1035 label within the pod-name budget of these
    tasks, else its :func:`dns1035_label` shortened to that budget (with a hash suffix).

    Raises ``ValueError`` when the task names leave too little room for any hashed name.
    """
    budget = max_job_name_length(task_names, max_replicas)
    if is_dns1035_label(name) and len(name) <= budget:
        return name
    if budget < _MIN_HASHED_LENGTH:
        raise ValueError(
            f"job name {name!r} must shrink to {budget} characters to keep pod names "
            f"'<job>-<task>-<index>' within 63, but a deterministic short name needs at least "
            f"{_MIN_HASHED_LENGTH}; use shorter task names"
        )
    return dns1035_label(name, budget)


def pod_name(job: str, task: str, index: int) -> str:
    """The name (and hostname) Volcano gives pod ``index`` of ``task`` in ``job``."""
    return f"{job}-{task}-{index}"
