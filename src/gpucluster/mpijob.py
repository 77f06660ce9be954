"""The controller side of ``gpucluster launch``: job spec files, YAML output and the MPIJob
schema check against the pinned mpi-operator v0.8.2 CRD (package data of this wheel).

The job spec model and both renderers (mpirun, MPIJob) are the collection's core
(``plugins/module_utils/launch.py``); this module adds what needs PyYAML, jsonschema and the
CRD file, which only the CLI uses.
"""

from __future__ import annotations

import functools
import importlib.resources
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from ansible_collections.gpucluster.cluster.plugins.module_utils.launch import (
    API_VERSIONS,
    JobSpec,
    JobSpecError,
    parse_job_spec,
)

CRD_RESOURCE = ("data", "mpi-operator-v0.8.2", "kubeflow.org_mpijobs.yaml")
CRD_VERSION = "v2beta1"


class MPIJobSchemaError(ValueError):
    """A rendered MPIJob does not satisfy the pinned mpi-operator CRD schema."""

    def __init__(self, errors: Sequence[str]):
        self.errors = list(errors)
        head = "MPIJob fails the mpi-operator v0.8.2 CRD schema:\n  - "
        super().__init__(head + "\n  - ".join(self.errors))


def load_job_spec(path: str | Path) -> JobSpec:
    """Read a job spec YAML file and validate it (:func:`parse_job_spec`)."""
    return parse_job_spec(read_job_spec(path))


def read_job_spec(path: str | Path) -> Any:
    """The YAML of a job spec file, not yet validated (``JobSpecError`` if unreadable or empty)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise JobSpecError([f"{path}: cannot read the job spec ({exc.strerror or exc})"]) from exc
    stream = io.StringIO(text)
    stream.name = str(path)  # PyYAML names the file in its marks (else "<unicode string>")
    try:
        data = yaml.safe_load(stream)
    except yaml.YAMLError as exc:
        raise JobSpecError([f"{path}: not valid YAML ({exc})"]) from exc
    if data is None:
        raise JobSpecError([
            f"{path}: the job spec is empty (no YAML mapping in it); start from "
            "examples/jobs/resnet50-lightcc.yml"
        ])
    return data


def to_yaml(documents: Sequence[Mapping[str, Any]]) -> str:
    """Multi-document YAML (``---`` separated), keys in rendering order."""
    return "".join("---\n" + yaml.safe_dump(dict(doc), sort_keys=False, default_flow_style=False)
                   for doc in documents)


# --------------------------------------------------------------------------------------------
# Schema validation against the pinned CRD
# --------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def mpijob_schema() -> dict[str, Any]:
    """``spec.versions[name=v2beta1].schema.openAPIV3Schema`` of the pinned mpi-operator
    v0.8.2 CRD (``gpucluster/data/mpi-operator-v0.8.2/kubeflow.org_mpijobs.yaml``)."""
    resource = importlib.resources.files("gpucluster").joinpath(*CRD_RESOURCE)
    crd = yaml.safe_load(resource.read_text(encoding="utf-8"))
    for version in crd["spec"]["versions"]:
        if version["name"] == CRD_VERSION:
            return version["schema"]["openAPIV3Schema"]
    raise LookupError(f"{'/'.join(CRD_RESOURCE)} has no {CRD_VERSION} version")


def _pruned_fields(instance: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    """Fields the API server would silently drop (structural-schema pruning): keys of an
    object whose schema lists ``properties`` without ``additionalProperties`` or
    ``x-kubernetes-preserve-unknown-fields``."""
    found: list[str] = []
    if isinstance(instance, Mapping):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            for key, value in instance.items():
                if key in props:
                    found += _pruned_fields(value, props[key], f"{path}.{key}")
                elif isinstance(extra, Mapping):
                    found += _pruned_fields(value, extra, f"{path}.{key}")
                elif extra is None:
                    found.append(f"{path}.{key}: unknown field; the API server would drop it silently")
        elif isinstance(extra, Mapping):
            for key, value in instance.items():
                found += _pruned_fields(value, extra, f"{path}.{key}")
    elif isinstance(instance, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(instance):
            found += _pruned_fields(item, schema["items"], f"{path}[{i}]")
    return found


@dataclass(frozen=True)
class SchemaCheck:
    """Outcome of :func:`check_mpijob`: ``checked`` is False when no schema applies."""

    api_version: str
    checked: bool
    errors: tuple[str, ...] = ()
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors


def check_mpijob(manifest: Mapping[str, Any]) -> SchemaCheck:
    """Check an MPIJob against the pinned CRD schema; collect every error, raise nothing.

    The pinned CRD (mpi-operator v0.8.2) carries only ``kubeflow.org/v2beta1``; a ``v1``
    manifest (served by the older mpi-operator / Kubeflow training-operator) is therefore not
    schema-checked, and the result says so in ``note`` with ``checked=False``.
    """
    api_version = str(manifest.get("apiVersion", ""))
    if manifest.get("kind") != "MPIJob":
        return SchemaCheck(api_version, True, (f"kind: {manifest.get('kind')!r} is not 'MPIJob'",))
    if api_version == API_VERSIONS["v1"]:
        return SchemaCheck(
            api_version,
            False,
            note=(
                "not schema-checked: the pinned mpi-operator v0.8.2 CRD defines only kubeflow.org/v2beta1, "
                "so a kubeflow.org/v1 MPIJob needs the Kubeflow training-operator (or mpi-operator < 0.4) "
                "and is not validated here"
            ),
        )
    if api_version != API_VERSIONS["v2beta1"]:
        return SchemaCheck(api_version, True, (f"apiVersion: {api_version!r} is not kubeflow.org/v2beta1",))
    schema = mpijob_schema()
    validator = jsonschema.Draft7Validator(schema)
    errors = []
    for err in sorted(validator.iter_errors(manifest), key=lambda e: [str(p) for p in e.absolute_path]):
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        errors.append(f"{where}: {err.message}")
    errors += [e.lstrip(".") for e in _pruned_fields(manifest, schema, "")]
    return SchemaCheck(api_version, True, tuple(errors))


def validate_mpijob(manifest: Mapping[str, Any]) -> SchemaCheck:
    """:func:`check_mpijob`, raising :class:`MPIJobSchemaError` listing every error."""
    result = check_mpijob(manifest)
    if result.errors:
        raise MPIJobSchemaError(result.errors)
    return result
