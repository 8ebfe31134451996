"""The W&B stand-in's artifacts: what an online run logs and uses, and what a run reports.

As wandb 0.31 sends them: ``query ArtifactType`` (does the collection exist?), ``mutation
CreateArtifact`` (a new version, ``v0``, ``v1``, ... per collection, with its metadata and
aliases), ``mutation CreateArtifactManifest`` and ``mutation CreateArtifactFiles`` (upload URLs
on the stand-in: ``PUT /artifacts/<id>/files/<name>``, kept in memory), ``mutation
CommitArtifact`` (the version becomes visible and takes ``latest`` and its aliases from older
versions), then ``query ArtifactByID``; as a run reads one (``run.use_artifact("name:latest")``
then ``.download()``): ``query ArtifactMembershipByName``, ``mutation UseArtifact`` (the run's
``used_artifacts()`` gain it), ``query FetchArtifactManifest`` and ``query
GetArtifactMembershipFileUrls`` (``GET`` URLs of the manifest and files). ``query
RunInputArtifacts`` and ``query RunOutputArtifacts`` answer ``Run.used_artifacts()`` and
``Run.logged_artifacts()`` in one page. The file URLs need no API key, like W&B's signed
storage URLs. Multipart uploads, deduplication by digest and references are not known. A mixin
of :class:`test_support.wandb_standin.WandbStandin`.
"""

from __future__ import annotations

import base64
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

_ARTIFACT_FILE_RE = re.compile(r"^/artifacts/([^/]+)/files/(.+)$")
_MANIFEST = "wandb_manifest.json"  # not a name an artifact's own file can have here


@dataclass
class _ArtifactVersion:
    """One version of an artifact collection, as logged by an online run."""

    artifact_id: str
    entity: str
    project: str
    name: str
    version: int
    artifact_type: str
    metadata: str
    digest: str
    aliases: list[str]
    state: str = "PENDING"
    files: dict[str, bytes] = field(default_factory=dict)
    """What was uploaded, by name; the manifest under :data:`_MANIFEST`."""


class Artifacts:
    """Artifact versions by id and by collection, and the artifacts each run used or logged."""

    _lock: threading.Lock
    url: str

    def _init_artifacts(
        self, any_run_artifacts: dict[str, list[tuple[str, int, str]]] | None
    ) -> None:
        self.any_run_artifacts = any_run_artifacts or {}
        self._artifacts: dict[tuple[str, str], list[tuple[str, str, str, int, str]]] = {}
        #: Logged artifact versions by id, and each collection's versions (v0 first).
        self._versions: dict[str, _ArtifactVersion] = {}
        self._collections: dict[tuple[str, str, str], list[_ArtifactVersion]] = {}

    def add_artifact(
        self,
        run_id: str,
        direction: str,
        entity: str,
        project: str,
        name: str,
        version: int,
        artifact_type: str,
    ) -> None:
        """Record that the run ``used`` or ``logged`` (``direction``) an artifact version."""
        self._artifacts.setdefault((run_id, direction), []).append(
            (entity, project, name, version, artifact_type)
        )

    def _put_artifact_file(self, path: str, body: bytes) -> bool:
        """Keep an artifact file PUT to the URL the stand-in gave for it (under the lock)."""
        match = _ARTIFACT_FILE_RE.match(path)
        version = match and self._versions.get(unquote(match[1]))
        if not version or version.state != "PENDING":
            return False
        version.files[unquote(match[2])] = body
        return True

    def _artifact_file(self, path: str) -> bytes | None:
        """An artifact file (or manifest) at a URL the stand-in gave (under the lock)."""
        match = _ARTIFACT_FILE_RE.match(path.partition("?")[0])
        version = match and self._versions.get(unquote(match[1]))
        return version.files.get(unquote(match[2])) if version and match else None

    def _op_RunInputArtifacts(self, variables: dict[str, Any]) -> dict[str, Any]:
        return self._run_artifacts(variables, "used")

    def _op_RunOutputArtifacts(self, variables: dict[str, Any]) -> dict[str, Any]:
        return self._run_artifacts(variables, "logged")

    def _run_artifacts(self, variables: dict[str, Any], direction: str) -> dict[str, Any]:
        entity, project = variables.get("entity"), variables.get("project")
        run_id = str(variables.get("run"))
        found = self._artifacts.get((run_id, direction))
        if found is None:
            found = [
                (entity, project, name, version, kind)
                for name, version, kind in self.any_run_artifacts.get(direction, [])
            ]
        edges = [
            {"node": _artifact_node(i, *artifact)} for i, artifact in enumerate(found, start=1)
        ]
        page = {"__typename": "PageInfo", "endCursor": None, "hasNextPage": False}
        connection = {"totalCount": len(edges), "pageInfo": page, "edges": edges}
        return {"project": {"run": {"artifacts": connection}}}

    # -- artifacts ---------------------------------------------------------------------------

    def logged_versions(self, entity: str, project: str, name: str) -> list[_ArtifactVersion]:
        """The versions of an artifact collection logged so far (v0 first)."""
        with self._lock:
            return list(self._collections.get((entity, project, name), []))

    def _find_version(self, entity: Any, project: Any, name: str) -> _ArtifactVersion | None:
        """``name:alias`` or ``name:v<N>`` in a project, as the server resolves it."""
        collection, _, tag = name.partition(":")
        versions = self._collections.get((entity, project, collection), [])
        tag = tag or "latest"
        for version in reversed(versions):
            if version.state == "COMMITTED" and (
                tag in version.aliases or tag == f"v{version.version}"
            ):
                return version
        return None

    def _op_ArtifactType(self, variables: dict[str, Any]) -> dict[str, Any]:
        # log_artifact asks first whether the collection exists with another type.
        with self._lock:
            found = self._find_version(
                variables.get("entity"), variables.get("project"), variables["name"]
            )
        artifact = None if found is None else {"artifactType": {"name": found.artifact_type}}
        return {"project": {"artifact": artifact}}

    def _op_CreateArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        given = variables["input"]
        key = (given["entityName"], given["projectName"], given["artifactCollectionName"])
        with self._lock:
            versions = self._collections.setdefault(key, [])
            latest = versions[-1].artifact_id if versions else None
            version = _ArtifactVersion(
                artifact_id=base64.b64encode(
                    f"Artifact:{len(self._versions) + 1}".encode()
                ).decode(),
                entity=key[0],
                project=key[1],
                name=key[2],
                version=len(versions),
                artifact_type=given["artifactTypeName"],
                metadata=given.get("metadata") or "{}",
                digest=given["digest"],
                aliases=[a["alias"] for a in given.get("aliases") or []],
            )
            versions.append(version)
            self._versions[version.artifact_id] = version
        sequence = {"latestArtifact": None if latest is None else {"id": latest}}
        artifact = {"id": version.artifact_id, "state": "PENDING", "artifactSequence": sequence}
        return {"createArtifact": {"artifact": artifact}}

    def _file_url(self, version: _ArtifactVersion, name: str) -> str:
        """Where an artifact's file is uploaded (PUT) and downloaded (GET): this stand-in."""
        return f"{self.url}/artifacts/{quote(version.artifact_id, safe='')}/files/{quote(name)}"

    def _op_CreateArtifactManifest(self, variables: dict[str, Any]) -> dict[str, Any]:
        version = self._versions[variables["artifactID"]]
        upload = {"id": f"manifest-{version.artifact_id}", "uploadHeaders": []}
        upload["uploadUrl"] = self._file_url(version, _MANIFEST)
        manifest = {"id": f"manifest-{version.artifact_id}", "file": upload}
        return {"createArtifactManifest": {"artifactManifest": manifest}}

    def _op_CreateArtifactFiles(self, variables: dict[str, Any]) -> dict[str, Any]:
        edges = []
        for given in variables["input"]["artifactFiles"]:
            version = self._versions[given["artifactID"]]
            node = {
                "storagePath": f"{version.artifact_id}/{given['name']}",
                "uploadUrl": self._file_url(version, given["name"]),
                "uploadHeaders": [],
                "uploadMultipartUrls": None,
                "artifact": {"id": version.artifact_id},
            }
            edges.append({"node": node})
        return {"createArtifactFiles": {"files": {"edges": edges}}}

    def _op_CommitArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Committed, a version is what name:alias finds; an alias names one version only, and
        # the server gives the newest "latest" whatever the client asked for.
        with self._lock:
            version = self._versions[variables["artifactID"]]
            version.state = "COMMITTED"
            version.aliases = sorted({*version.aliases, "latest"})
            for other in self._collections[(version.entity, version.project, version.name)]:
                if other is not version:
                    other.aliases = [a for a in other.aliases if a not in version.aliases]
        return {
            "commitArtifact": {"artifact": {"id": version.artifact_id, "digest": version.digest}}
        }

    def _logged_node(self, version: _ArtifactVersion) -> dict[str, Any]:
        """The ``ArtifactFragment`` of a logged version: its own id, metadata, files, aliases."""
        files = [body for name, body in version.files.items() if name != _MANIFEST]
        node = _artifact_node(
            0, version.entity, version.project, version.name, version.version, version.artifact_type
        )
        collection = {k: node["artifactSequence"][k] for k in ("__typename", "name", "project")}
        aliases = [
            {
                "__typename": "ArtifactAlias",
                "id": f"{version.artifact_id}:{alias}",
                "alias": alias,
                "artifactCollection": collection,
            }
            for alias in version.aliases
        ]
        node.update(
            id=version.artifact_id,
            metadata=version.metadata,
            state=version.state,
            size=sum(map(len, files)),
            digest=version.digest,
            fileCount=len(files),
            aliases=aliases,
        )
        return node

    def _op_ArtifactByID(self, variables: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            version = self._versions.get(variables["id"])
            return {"artifact": None if version is None else self._logged_node(version)}

    def _op_ArtifactMembershipByName(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Api.artifact("entity/project/name:alias"), which run.use_artifact(name) asks.
        with self._lock:
            version = self._find_version(
                variables["entity"], variables["project"], variables["name"]
            )
            if version is None:
                return {"project": {"artifactCollectionMembership": None}}
            node = self._logged_node(version)
        membership = {
            "__typename": "ArtifactCollectionMembership",
            "id": f"membership-{version.artifact_id}",
            "versionIndex": version.version,
            "createdAt": node["createdAt"],
            "aliases": [{k: a[k] for k in ("__typename", "id", "alias")} for a in node["aliases"]],
            "artifactCollection": node["artifactSequence"],
            "artifact": node,
        }
        return {"project": {"artifactCollectionMembership": membership}}

    def _op_UseArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        # run.use_artifact: the run's input artifacts (Run.used_artifacts()) gain the version.
        with self._lock:
            v = self._versions[variables["artifactID"]]
            used = (v.entity, v.project, v.name, v.version, v.artifact_type)
            self._artifacts.setdefault((variables["runName"], "used"), []).append(used)
        return {"useArtifact": {"artifact": {"id": v.artifact_id}}}

    def _op_FetchArtifactManifest(self, variables: dict[str, Any]) -> dict[str, Any]:
        version = self._versions[variables["id"]]
        manifest = {"file": {"directUrl": self._file_url(version, _MANIFEST)}}
        return {"artifact": {"currentManifest": manifest}}

    def _op_GetArtifactMembershipFileUrls(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Artifact.download: where each file of the version is (one page holds them all).
        name = f"{variables['collection']}:{variables['alias']}"
        with self._lock:
            version = self._find_version(variables["entity"], variables["project"], name)
            names = [] if version is None else [n for n in version.files if n != _MANIFEST]
        edges = [
            {"node": {"__typename": "File", "name": n, "directUrl": self._file_url(version, n)}}
            for n in names
            if version is not None  # (for the type checker: no names without a version)
        ]
        page = {"__typename": "PageInfo", "endCursor": None, "hasNextPage": False}
        files = {"pageInfo": page, "edges": edges}
        collection = {"__typename": "ArtifactSequence", "artifactMembership": {"files": files}}
        return {"project": {"artifactCollection": collection}}


def _artifact_node(
    index: int, entity: str, project: str, name: str, version: int, artifact_type: str
) -> dict[str, Any]:
    """An ``ArtifactFragment`` as wandb 0.31 asks for it."""
    project_info = {
        "id": "UHJvamVjdDo3",
        "internalId": "7",
        "name": project,
        "entity": {"name": entity},
    }
    sequence = {"__typename": "ArtifactSequence", "name": name, "project": project_info}
    return {
        "__typename": "Artifact",
        "id": base64.b64encode(f"Artifact:{index}:{name}:{version}".encode()).decode(),
        "artifactSequence": sequence,
        "versionIndex": version,
        "artifactType": {"name": artifact_type},
        "description": None,
        "metadata": "{}",
        "ttlDurationSeconds": -1,
        "ttlIsInherited": True,
        "tags": [],
        "historyStep": None,
        "state": "COMMITTED",
        "size": 1024,
        "digest": f"{index:032x}",
        "digestAlgorithm": "MANIFEST_MD5",
        "commitHash": None,
        "fileCount": 1,
        "createdAt": "2026-01-01T00:00:00",
        "updatedAt": "2026-01-01T00:05:00",
        "aliases": [],
    }
