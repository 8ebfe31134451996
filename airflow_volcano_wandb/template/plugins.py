"""Which job plugins each Volcano release has: the one table the renderer and ``doctor`` use.

Volcano's admission webhook refuses a job that names a plugin its controller does not
register ("unable to find job plugin", ``pkg/webhooks/admission/jobs/validate/admit_job.go``
since v1.0.0), so a job may only name plugins its target release has. :data:`PLUGIN_SINCE`
was read from the registry, ``pkg/controllers/job/plugins/factory.go``, at every release tag
of volcano-sh/volcano (v1.0.0 ... v1.15.1; ``hcclrank`` was backported to 1.12's patch
releases). No release has removed a plugin, so "since" is the whole rule. Pure.
"""

from __future__ import annotations

import re

#: (major, minor, patch) of a Volcano release.
Version = tuple[int, int, int]

PLUGIN_SINCE: dict[str, Version] = {
    "ssh": (1, 0, 0),
    "env": (1, 0, 0),
    "svc": (1, 0, 0),
    "tensorflow": (1, 5, 0),
    "mpi": (1, 6, 0),
    "pytorch": (1, 7, 0),
    "hcclrank": (1, 12, 3),
    "ray": (1, 13, 0),
}
#: The oldest target the provider renders for: the first release with the ``pytorch`` plugin.
OLDEST_SUPPORTED: Version = PLUGIN_SINCE["pytorch"]

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


class VersionError(ValueError):
    """Text that is not a Volcano release version."""


def parse_version(text: str) -> Version:
    """``v1.14.1``, ``1.14.1`` or ``1.14`` (patch 0) as a tuple. Pre-release and build suffixes
    are refused: a release candidate's plugin set is not the release's."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise VersionError(f"{text!r} is not a Volcano version such as v1.14.1")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def show_version(version: Version) -> str:
    return "v" + ".".join(map(str, version))


def target_version(text: str) -> Version:
    """A supported target release; :class:`VersionError` names the oldest one otherwise."""
    version = parse_version(text)
    if version < OLDEST_SUPPORTED:
        raise VersionError(
            f"Volcano {show_version(version)} is older than the oldest supported release, "
            f"{show_version(OLDEST_SUPPORTED)} (the first with the pytorch plugin)"
        )
    return version


def plugins_in(version: Version) -> frozenset[str]:
    """The job plugins ``version`` registers."""
    return frozenset(name for name, since in PLUGIN_SINCE.items() if version >= since)
