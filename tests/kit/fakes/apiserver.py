"""A fake Kubernetes API server for the calls the agent makes, checking them as the real one does.

- `POST /api/v1/namespaces/{ns}/pods/{name}/eviction`: JSON only (415 otherwise); the body must be a
  `policy/v1` `Eviction` whose metadata names the pod of the URL (400 otherwise); an unknown pod is 404;
  `deleteOptions.preconditions.uid` different from the pod's UID is 409. Scripted answers per pod
  (`script[(ns, name)] = [429, 500, ...]`) come first; then 201 with a Success Status, and the pod is gone.
- `POST /api/v1/namespaces/{ns}/events`: a core/v1 Event in that namespace, involvedObject in the same
  namespace, type Normal|Warning, a reason, RFC 3339 timestamps; 201 echoes it.
- `GET /api/v1/nodes/{name}` and `PATCH` with merge-patch, strategic-merge-patch or json-patch content
  types (415 for anything else, 400 for a body that does not fit its content type). Every write bumps
  `metadata.resourceVersion`; a patch that carries a different `metadata.resourceVersion` is 409, as the
  real server's optimistic concurrency answers. `interleave` holds merge patches another writer applies
  just before the next PATCH is handled (a concurrent koord-yarn-operator).
- Koordinator's cluster-scoped `slo.koordinator.sh/v1alpha1` `nodemetrics` and `nodeslos` (`koord`, keyed
  by (plural, name)): GET (404 when absent), and `PUT .../{name}/status` for nodemetrics, which replaces
  only `status`, needs the stored `resourceVersion` (409 otherwise) and validates the object against the
  vendored CRD's OpenAPI schema (422 Invalid otherwise), as the status subresource does.
Error bodies are `Status` objects as the API server writes them.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from kit.fakes.httpserver import Answer, FakeHttpServer, Recorded

_EVICT = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction$")
_EVENTS = re.compile(r"^/api/v1/namespaces/([^/]+)/events$")
_NODE = re.compile(r"^/api/v1/nodes/([^/]+)$")
_KOORD = re.compile(r"^/apis/slo\.koordinator\.sh/v1alpha1/(nodemetrics|nodeslos)/([^/]+?)(/status)?$")
CRDS = Path(__file__).resolve().parents[2] / "vendor" / "koordinator"
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Answer:
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        doc["details"] = details
    return Answer.of_json(code, doc)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeApiServer(FakeHttpServer):
    def __init__(
        self,
        node: Path,
        pods: dict[tuple[str, str], str],
        *,
        require_uid: bool = True,
        tls: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(tls=tls)
        self.node = json.loads(node.read_text())
        self.pods = dict(pods)  # (namespace, name) -> uid
        self.require_uid = require_uid
        self.script: dict[tuple[str, str], list[int]] = {}
        self.node_script: list[int] = []
        self.evicted: list[tuple[str, str, str]] = []  # (ns, name, uid)
        self.events: list[dict[str, Any]] = []
        self.patches: list[tuple[str, Any]] = []  # (content type, body)
        self.interleave: list[dict[str, Any]] = []  # merge patches "another writer" applies first
        self.conflicts = 0
        self.koord: dict[tuple[str, str], dict[str, Any]] = {}  # (plural, name) -> object
        self.status_puts: list[dict[str, Any]] = []
        self._rv = 1000

    def bump(self, obj: dict[str, Any]) -> None:
        """A write: a new resourceVersion, as etcd's revision moves."""
        self._rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._rv)

    def route(self, rec: Recorded) -> Answer:
        path = rec.path.split("?", 1)[0]
        if rec.method == "POST" and (m := _EVICT.match(path)):
            return self._evict(rec, m.group(1), m.group(2))
        if rec.method == "POST" and (m := _EVENTS.match(path)):
            return self._event(rec, m.group(1))
        if (m := _NODE.match(path)) and rec.method in ("GET", "PATCH"):
            if m.group(1) != self.node["metadata"]["name"]:
                return status(
                    404, "NotFound", f'nodes "{m.group(1)}" not found', {"name": m.group(1), "kind": "nodes"}
                )
            return Answer.of_json(200, self.node) if rec.method == "GET" else self._patch(rec)
        if m := _KOORD.match(path):
            return self._koord(rec, m.group(1), m.group(2), bool(m.group(3)))
        return status(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _json_body(rec: Recorded) -> tuple[Any, Answer | None]:
        ctype = rec.headers.get("content-type", "application/json").split(";")[0].strip()
        if ctype != "application/json":
            return None, status(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/json, application/yaml (got {ctype})",
            )
        try:
            return json.loads(rec.body), None
        except ValueError as err:
            return None, status(400, "BadRequest", f"error decoding body: {err}")

    def _evict(self, rec: Recorded, ns: str, name: str) -> Answer:
        body, err = self._json_body(rec)
        if err:
            return err
        if (
            not isinstance(body, dict)
            or body.get("kind") != "Eviction"
            or body.get("apiVersion") != "policy/v1"
        ):
            return status(400, "BadRequest", f"expected a policy/v1 Eviction, got {str(body)[:200]}")
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            return status(400, "BadRequest", "name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, "", ns):
            return status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        uid = self.pods.get((ns, name))
        if uid is None:
            return status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        pre = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if pre is None and self.require_uid:
            return status(400, "BadRequest", "test server: deleteOptions.preconditions.uid is required")
        if pre is not None and pre != uid:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on Pod "{name}": Precondition failed: '
                f"UID in precondition: {pre}, UID in object meta: {uid}",
                {"name": name, "kind": "Pod"},
            )
        scripted = self.script.get((ns, name))
        code = scripted.pop(0) if scripted else 201
        if code == 429:
            return status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": "The disruption budget web-pdb needs 2 healthy pods "
                            "and has 2 currently",
                        }
                    ]
                },
            )
        if code == 500:
            return status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        if code != 201:
            return status(code, "Unknown", f"scripted {code}")
        del self.pods[(ns, name)]
        self.evicted.append((ns, name, uid))
        return Answer.of_json(
            201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def _event(self, rec: Recorded, ns: str) -> Answer:
        ev, err = self._json_body(rec)
        if err:
            return err
        problems = []
        if (
            not isinstance(ev, dict)
            or ev.get("kind", "Event") != "Event"
            or ev.get("apiVersion", "v1") != "v1"
        ):
            return status(400, "BadRequest", "expected a v1 Event")
        meta = ev.get("metadata") or {}
        if not meta.get("name") and not meta.get("generateName"):
            problems.append("metadata.name: Required value")
        if meta.get("namespace") not in (None, ns):
            problems.append("metadata.namespace: does not match the namespace of the request")
        inv = ev.get("involvedObject") or {}
        if inv.get("namespace") != ns:
            problems.append("involvedObject.namespace: Invalid value: does not match event.namespace")
        if not inv.get("kind") or not inv.get("name"):
            problems.append("involvedObject: kind and name are required")
        if ev.get("type") not in ("Normal", "Warning"):
            problems.append(f"type: Unsupported value: {ev.get('type')!r}")
        if not ev.get("reason") or len(ev["reason"]) > 128:
            problems.append("reason: Required value (at most 128 characters)")
        if len(ev.get("message") or "") > 1024 * 4:
            problems.append("message: Too long")
        for k in ("firstTimestamp", "lastTimestamp"):
            if k in ev and ev[k] is not None and not _RFC3339.match(ev[k]):
                problems.append(f"{k}: not RFC 3339: {ev[k]!r}")
        if problems:
            return status(422, "Invalid", f"Event is invalid: {'; '.join(problems)}")
        self.events.append(ev)
        return Answer.of_json(201, ev)

    def _patch(self, rec: Recorded) -> Answer:
        ctype = rec.headers.get("content-type", "").split(";")[0].strip()
        if ctype not in PATCH_TYPES:
            return status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                + ", ".join(PATCH_TYPES),
            )
        if self.node_script:
            code = self.node_script.pop(0)
            if code != 200:
                return status(code, "InternalError" if code >= 500 else "Unknown", f"scripted {code}")
        try:
            body = json.loads(rec.body)
        except ValueError as err:
            return status(400, "BadRequest", f"error decoding patch: {err}")
        if ctype == "application/json-patch+json":
            if not isinstance(body, list):
                return status(
                    400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
                )
            return status(422, "Invalid", "test server: json-patch not applied")
        if not isinstance(body, dict):
            return status(400, "BadRequest", "patch body must be an object")
        while self.interleave:
            self.node = merge_patch(self.node, self.interleave.pop(0))
            self.bump(self.node)
        want = (body.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != self.node["metadata"].get("resourceVersion"):
            self.conflicts += 1
            name = self.node["metadata"]["name"]
            return status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                          "been modified; please apply your changes to the latest version and try again",
                          {"name": name, "kind": "nodes"})
        self.patches.append((ctype, body))
        self.node = merge_patch(self.node, body)
        self.bump(self.node)
        return Answer.of_json(200, self.node)

    # -- Koordinator custom resources ------------------------------------------------------------------

    def _koord(self, rec: Recorded, plural: str, name: str, sub: bool) -> Answer:
        obj = self.koord.get((plural, name))
        if rec.method == "GET" and not sub:
            if obj is None:
                return status(404, "NotFound", f'{plural}.slo.koordinator.sh "{name}" not found',
                              {"name": name, "group": "slo.koordinator.sh", "kind": plural})
            return Answer.of_json(200, obj)
        if rec.method != "PUT" or not sub or plural != "nodemetrics":
            return status(405, "MethodNotAllowed", f"the server does not allow this method on {plural}")
        body, err = self._json_body(rec)
        if err:
            return err
        if obj is None:
            return status(404, "NotFound", f'nodemetrics.slo.koordinator.sh "{name}" not found')
        meta = body.get("metadata") or {} if isinstance(body, dict) else {}
        if not isinstance(body, dict) or meta.get("name") != name or body.get("kind") != "NodeMetric":
            return status(400, "BadRequest", "expected the NodeMetric named in the URL")
        if meta.get("resourceVersion") != obj["metadata"].get("resourceVersion"):
            self.conflicts += 1
            return status(409, "Conflict", f'Operation cannot be fulfilled on nodemetrics.slo.koordinator.sh '
                          f'"{name}": the object has been modified; please apply your changes to the latest '
                          "version and try again", {"name": name, "kind": "nodemetrics"})
        problems = schema_errors("nodemetrics", {**obj, "status": body.get("status")})
        if problems:
            return status(422, "Invalid", f'NodeMetric.slo.koordinator.sh "{name}" is invalid: '
                          + "; ".join(problems[:5]))
        new = copy.deepcopy(obj)
        new["status"] = body.get("status")
        self.bump(new)
        self.koord[(plural, name)] = new
        self.status_puts.append(copy.deepcopy(body["status"]))
        return Answer.of_json(200, new)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.node["metadata"].get("annotations") or {})


def crd_schema(plural: str) -> dict[str, Any]:
    """The `v1alpha1` OpenAPI v3 schema of a vendored Koordinator CRD (`nodemetrics` or `nodeslos`)."""
    import yaml

    crd = yaml.safe_load((CRDS / f"slo.koordinator.sh_{plural}.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return dict(version["schema"]["openAPIV3Schema"])


def unknown_keys(doc: Any, schema: dict[str, Any], at: str = "") -> list[str]:
    """Keys the schema does not name (the CRD has no additionalProperties: false, so jsonschema alone
    would let a misspelt field through; the real API server would prune it silently)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(doc, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in doc.items():
            if props is not None:
                if k not in props:
                    out.append(f"{at}.{k}")
                else:
                    out += unknown_keys(v, props[k], f"{at}.{k}")
            elif isinstance(extra, dict):
                out += unknown_keys(v, extra, f"{at}.{k}")
    elif isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(doc):
            out += unknown_keys(v, schema["items"], f"{at}[{i}]")
    return out


def schema_errors(plural: str, obj: Any) -> list[str]:
    """What the API server would refuse in `obj` (schema errors), and the fields it would prune."""
    import jsonschema

    schema = crd_schema(plural)
    v = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = [f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in v.iter_errors(obj)]
    return errors + [f"{k}: unknown field" for k in unknown_keys(obj, schema)]
