"""A fake Kubernetes API server that knows the built-in kinds only (no CRD installed), for
`kubectl apply --server-side --dry-run=server` of the rendered overlays.

No kube-apiserver can be installed on this kind of machine (Debian ships none, PyPI neither), so this server
stands in for one of a cluster without the Prometheus Operator:

- **Discovery** (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`, legacy format) lists every built-in
  resource of one Kubernetes release, taken from two packages generated from that release's OpenAPI
  specification: the resource paths (group, version, plural, namespaced or not) from the official Python
  client's API modules (`kubernetes`), the kinds from the JSON schemas `kubernetes-validate` vendors. Both
  are pinned to the same release (`RELEASE` checks it). A kind of a third-party group is not discovered,
  so kubectl fails on it with "no matches for kind ... ensure CRDs are installed first", as a real cluster
  without the CRD answers.
- **Server-side apply** (`PATCH` with `application/apply-patch+yaml`): the body's apiVersion and kind must
  be the URL's resource (400), its name the URL's (400); a namespaced object needs its namespace to exist
  (404 `namespaces "x" not found`, as the NamespaceLifecycle admission plugin answers, also in a dry run);
  the object must validate against the release's schema, strictly (422 Invalid, unknown fields included,
  as `fieldValidation=Strict` does). With `dryRun=All` nothing is stored; otherwise the object is.
- `/openapi/v3` and its group-version documents: the PATCH operation of every resource, with its
  `x-kubernetes-group-version-kind` and the `fieldValidation` and `dryRun` query parameters, which is what
  kubectl reads to leave validation to the server (it sends `fieldValidation=Strict`) instead of
  downloading the schemas to validate on its side. For a kind of a group the v3 documents do not have
  (a CRD's), kubectl falls back to `/openapi/v2`: an empty document here, so it finds no schema for it and
  goes on to map the kind, which discovery does not know. `GET` of a stored object (404 otherwise),
  `/version`.

Not modelled: admission webhooks, defaulting, managed fields, conflicts, RBAC.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import yaml
from kit.fakes.httpserver import Answer, FakeHttpServer, Recorded

RELEASE = "1.37.0"  # kubernetes-validate's newest schemas; the `kubernetes` client of the same minor
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def client_release() -> str:
    """The Kubernetes minor release the `kubernetes` client was generated from: client 37.x is 1.37."""
    return f"1.{kubernetes.__version__.split('.')[0]}"


def _schema_dir() -> Path:
    return Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{RELEASE}-local-strict"


@functools.cache
def _schema_kinds() -> dict[tuple[str, str], set[str]]:
    """(group, version) -> the kinds with a top-level object schema in the vendored release."""
    out: dict[tuple[str, str], set[str]] = {}
    for path in _schema_dir().glob("*.json"):
        if path.name.startswith("_") or path.name == "all.json":
            continue
        props = json.loads(path.read_text()).get("properties", {})
        versions = props.get("apiVersion", {}).get("enum") or []
        kinds = props.get("kind", {}).get("enum") or []
        if "metadata" not in props:
            continue
        for api_version in versions:
            group, _, version = api_version.rpartition("/")
            out.setdefault((group, version), set()).update(kinds)
    return out


_CREATE = re.compile(r"def _create_(namespaced_)?(\w+?)_serialize\(.*?resource_path='([^']+)'", re.S)
_PATH = re.compile(r"^/(?:api|apis/(?P<group>[^/{}]+))/(?P<version>[^/{}]+)/"
                   r"(?:namespaces/\{namespace\}/)?(?P<plural>[a-z0-9]+)$")


@functools.cache
def builtin_resources() -> tuple[Resource, ...]:
    """Every creatable built-in resource of the release (subresources and custom objects left out)."""
    kinds = _schema_kinds()
    api = Path(kubernetes.__file__).parent / "client" / "api"
    found: set[Resource] = set()
    for module in sorted(api.glob("*_api.py")):
        for m in _CREATE.finditer(module.read_text()):
            namespaced, snake, path = bool(m.group(1)), m.group(2), m.group(3)
            pm = _PATH.match(path)
            if pm is None:
                continue  # a subresource ({name} in the path) or the custom-objects API ({group}/{plural})
            group, version = pm.group("group") or "", pm.group("version")
            want = snake.replace("_", "")
            match = [k for k in kinds.get((group, version), ()) if k.lower() == want]
            if len(match) == 1:
                found.add(Resource(group, version, pm.group("plural"), match[0], namespaced))
    return tuple(sorted(found, key=lambda r: (r.group, r.version, r.plural)))


def builtin_groups() -> set[str]:
    return {r.group for r in builtin_resources()}


def _status(code: int, reason: str, message: str) -> Answer:
    return Answer.of_json(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                 "message": message, "reason": reason, "code": code})


_OBJECT = re.compile(r"^/(?:api|apis/(?P<group>[^/]+))/(?P<version>[^/]+)/"
                     r"(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[^/]+)/(?P<name>[^/]+)$")


def _pb_field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (payloads here are under 128 bytes: a one-byte length)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _openapi_v2_empty() -> bytes:
    """An OpenAPI v2 document (gnostic's protobuf `openapi.v2.Document`, as kubectl asks for it) with no paths
    and no definitions: swagger "2.0", info {title}, empty paths."""
    return _pb_field(1, b"2.0") + _pb_field(2, _pb_field(1, b"Kubernetes")) + _pb_field(8, b"")


class BuiltinApiServer(FakeHttpServer):
    def __init__(self) -> None:
        super().__init__()
        self.resources = builtin_resources()
        self.stored: dict[tuple[str, str, str, str], dict[str, Any]] = {}  # (gv, plural, ns, name) -> obj
        self.applied: list[tuple[str, str, bool]] = []  # (kind, name, dry run) of every accepted apply

    # -- discovery ---------------------------------------------------------------------------------

    def _resource_list(self, group: str, version: str) -> Answer | None:
        rows = [r for r in self.resources if (r.group, r.version) == (group, version)]
        if not rows:
            return None
        return Answer.of_json(200, {
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": rows[0].group_version,
            "resources": [{"name": r.plural, "singularName": r.kind.lower(), "namespaced": r.namespaced,
                           "kind": r.kind, "verbs": ["create", "delete", "get", "list", "patch", "update",
                                                     "watch"]} for r in rows]})

    def _group_list(self) -> Answer:
        groups: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group:
                groups.setdefault(r.group, [])
                if r.version not in groups[r.group]:
                    groups[r.group].append(r.version)

        def rank(v: str) -> tuple[int, int, int]:  # v1 > v1beta2 > v1alpha1: the preferred version first
            m = re.match(r"v(\d+)(?:(alpha|beta)(\d+))?$", v)
            assert m, v
            return (int(m.group(1)), {"alpha": 0, "beta": 1, None: 2}[m.group(2)], int(m.group(3) or 0))

        out = []
        for group, versions in sorted(groups.items()):
            versions.sort(key=rank, reverse=True)
            entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            out.append({"name": group, "versions": entries, "preferredVersion": entries[0]})
        return Answer.of_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": out})

    def _openapi_root(self) -> Answer:
        paths = {}
        for gv in sorted({r.group_version for r in self.resources}):
            rel = f"api/{gv}" if "/" not in gv else f"apis/{gv}"
            paths[rel] = {"serverRelativeURL": f"/openapi/v3/{rel}?hash=0"}
        return Answer.of_json(200, {"paths": paths})

    def _openapi_gv(self, rel: str) -> Answer | None:
        rows = [r for r in self.resources if (f"apis/{r.group_version}" if r.group else f"api/{r.version}")
                == rel]
        if not rows:
            return None
        params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                  {"name": "dryRun", "in": "query", "schema": {"type": "string"}}]
        paths = {}
        for r in rows:
            ns = "namespaces/{namespace}/" if r.namespaced else ""
            paths[f"/{rel}/{ns}{r.plural}/{{name}}"] = {"patch": {
                "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
                "parameters": params, "responses": {"201": {"description": "Created"}}}}
        return Answer.of_json(200, {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": RELEASE},
                                    "paths": paths})

    # -- objects -----------------------------------------------------------------------------------

    def _find(self, group: str, version: str, plural: str) -> Resource | None:
        for r in self.resources:
            if (r.group, r.version, r.plural) == (group, version, plural):
                return r
        return None

    def _apply(self, rec: Recorded, m: re.Match[str], query: dict[str, list[str]]) -> Answer:
        group, version, ns, plural, name = (m.group("group") or "", m.group("version"), m.group("ns") or "",
                                            m.group("plural"), m.group("name"))
        res = self._find(group, version, plural)
        if res is None or res.namespaced != bool(ns):
            return _status(404, "NotFound", "the server could not find the requested resource")
        if rec.headers.get("content-type", "").split(";")[0] != "application/apply-patch+yaml":
            return _status(415, "UnsupportedMediaType", "only server-side apply is modelled here")
        obj = yaml.safe_load(rec.body)
        if not isinstance(obj, dict):
            return _status(400, "BadRequest", "the body is not an object")
        if (obj.get("apiVersion"), obj.get("kind")) != (res.group_version, res.kind):
            return _status(400, "BadRequest", f"{obj.get('apiVersion')}/{obj.get('kind')} does not match the "
                                              f"resource {res.group_version}/{res.plural}")
        meta = obj.get("metadata") or {}
        if meta.get("name") != name or (ns and meta.get("namespace", ns) != ns):
            return _status(400, "BadRequest", "the name or namespace of the body does not match the URL")
        if ns and ("v1", "namespaces", "", ns) not in self.stored:
            return _status(404, "NotFound", f'namespaces "{ns}" not found')
        try:
            kubernetes_validate.validate(obj, RELEASE, strict=True)
        except kubernetes_validate.ValidationError as err:
            return _status(422, "Invalid", f'{res.kind} "{name}" is invalid: {err}')
        dry = query.get("dryRun") == ["All"]
        out = {**obj, "metadata": {**meta, "uid": f"uid-{len(self.applied)}", "resourceVersion": "1"}}
        if ns:
            out["metadata"]["namespace"] = ns
        if not dry:
            self.stored[(res.group_version, plural, ns, name)] = out
        self.applied.append((res.kind, name, dry))
        return Answer.of_json(201, out)

    def route(self, rec: Recorded) -> Answer:
        url = urllib.parse.urlsplit(rec.path)
        path, query = url.path.rstrip("/"), urllib.parse.parse_qs(url.query)
        if rec.method == "GET":
            if path == "/version":
                major, minor, _ = RELEASE.split(".")
                return Answer.of_json(200, {"major": major, "minor": minor, "gitVersion": f"v{RELEASE}"})
            if path == "/api":
                return Answer.of_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                            "serverAddressByClientCIDRs": []})
            if path == "/apis":
                return self._group_list()
            if path == "/openapi/v3":
                return self._openapi_root()
            if path == "/openapi/v2":
                return Answer(200, _openapi_v2_empty(), OPENAPI_V2_PROTOBUF)
            if path.startswith("/openapi/v3/"):
                return self._openapi_gv(path.removeprefix("/openapi/v3/")) or _status(404, "NotFound", path)
            if path == "/api/v1":
                return self._resource_list("", "v1") or _status(404, "NotFound", path)
            gm = re.match(r"^/apis/([^/]+)/([^/]+)$", path)
            if gm:
                return self._resource_list(gm.group(1), gm.group(2)) or _status(404, "NotFound", path)
        m = _OBJECT.match(path)
        if m and rec.method == "PATCH":
            return self._apply(rec, m, query)
        if m and rec.method == "GET":
            group, version = m.group("group") or "", m.group("version")
            gv = f"{group}/{version}" if group else version
            obj = self.stored.get((gv, m.group("plural"), m.group("ns") or "", m.group("name")))
            if obj is not None:
                return Answer.of_json(200, obj)
            return _status(404, "NotFound", f'{m.group("plural")} "{m.group("name")}" not found')
        return _status(404, "NotFound", "the server could not find the requested resource")

