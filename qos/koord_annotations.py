"""The Node annotations the agent shares with koord-manager, read as koord-manager's Go code reads them.

Upstream (koordinator v1.8.0, `apis/slo/v1alpha1/node.go`):

    type ThirdPartyAllocations struct {
        Allocations []ThirdPartyAllocation `json:"allocations,omitempty"`
    }
    type ThirdPartyAllocation struct {
        Name      string               `json:"name"`
        Priority  apiext.PriorityClass `json:"priority"`
        Resources corev1.ResourceList  `json:"resources,omitempty"`
    }

`encoding/json` decodes `node.koordinator.sh/thirdPartyAllocations` into it: `{}`, `null` and
`{"allocations":null}` are no entries (and an empty list is written as `{}`); unknown fields are ignored;
field names match case-insensitively (the last match wins); `null` is the zero value (an entry with no name,
no class, no resources); a value of the wrong JSON type, or a quantity that does not parse, fails the whole
annotation. koord-manager's batch plugin (`pkg/slo-controller/noderesource/plugins/batchresource/plugin.go`,
`Prepare`) then sets the node's batch allocatable to `max(origin − Σ entries of priority "koord-batch", 0)`,
whatever their names (`GetThirdPartyAllocatedResByPriority`).
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from qos.model import Resources
from qos.quantity import QuantityError, parse_quantity, to_int

BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
ORIGIN_ANNOTATION = "node.koordinator.sh/originExtendedAllocatable"
THIRD_PARTY_ANNOTATION = "node.koordinator.sh/thirdPartyAllocations"
PRIORITY_BATCH = "koord-batch"  # apiext.PriorityBatch: the class koord-manager subtracts
MAX_TEXT = 65536

# Sanity bounds for values read from annotations: a node of a million cores or an exbibyte is a typo.
MAX_MILLI_CPU = 10**9
MAX_MEMORY_BYTES = 2**60


class BatchAnnotationError(ValueError):
    """A batch annotation is malformed; the message names the annotation and what is wrong."""


@dataclass(frozen=True, slots=True)
class ThirdPartyAllocation:
    """One entry as Go decodes it. `resources` holds the two batch resources (batch-cpu is a count of
    milli-cores, batch-memory bytes), rounded up to whole units; other resource names are checked, not
    kept."""

    name: str = ""
    priority: str = ""
    resources: Resources = field(default_factory=Resources)


class _Object(list[tuple[str, Any]]):
    """A JSON object as its members appear in the text, duplicates kept (Go applies each in turn)."""


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _json_type(v: object) -> str:
    if isinstance(v, _Object):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "a boolean"
    return "a number"


def _decode(text: object, where: str) -> object:
    if not isinstance(text, str):
        raise BatchAnnotationError(f"{where}: expected a JSON string, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise BatchAnnotationError(f"{where}: {len(text)} characters, more than {MAX_TEXT}")
    try:
        return json.loads(text, object_pairs_hook=_Object, parse_float=Decimal,
                          parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as err:
        raise BatchAnnotationError(f"{where}: not valid JSON: {err}") from err


def _fold(name: str) -> str:
    """`encoding/json`'s foldName: ASCII upper-cased, other runes ToUpper(ToLower(r)) (simple mappings)."""
    out = []
    for c in name:
        if c.isascii():
            out.append(c.upper())
            continue
        low = c.lower() if len(c.lower()) == 1 else c
        out.append(low.upper() if len(low.upper()) == 1 else low)
    return "".join(out)


def _field(obj: _Object, name: str) -> object:
    """The member Go decodes into the field tagged `name`: the exact name or a case-insensitive match, the
    last one in the text winning; None when absent (absent and null both leave the zero value)."""
    folded = _fold(name)
    value: object = None
    for key, v in obj:
        if key == name or _fold(key) == folded:
            value = v
    return value


def _string(v: object, where: str) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise BatchAnnotationError(f"{where}: must be a string or null, got {_json_type(v)}")
    return v


def _quantity(v: object, where: str) -> int:
    """A `resource.Quantity` from JSON (a string, a number, or null for zero), rounded up to a whole unit."""
    if v is None:
        return 0
    if isinstance(v, Decimal):
        v = str(v)
    try:
        if isinstance(v, list | _Object):
            raise QuantityError(f"not a quantity: {_json_type(v)}")
        parse_quantity(v)
        return to_int(v)
    except QuantityError as err:
        raise BatchAnnotationError(f"{where}: {err}") from err


def _resources(v: object, where: str) -> Resources:
    """A `corev1.ResourceList`: every quantity must parse; the batch pair is kept (a name given twice: the
    last)."""
    if v is None:
        return Resources()
    if not isinstance(v, _Object):
        raise BatchAnnotationError(f"{where}: must be an object or null, got {_json_type(v)}")
    values = {name: _quantity(q, f"{where}: {name}") for name, q in v}
    return Resources(values.get(BATCH_CPU, 0), values.get(BATCH_MEMORY, 0))


def _entries(text: object) -> list[tuple[ThirdPartyAllocation, object]]:
    """Each entry as Go decodes it, with the JSON value it came from (decoded)."""
    where = THIRD_PARTY_ANNOTATION
    data = _decode(text, where)
    if data is None:
        return []
    if not isinstance(data, _Object):
        raise BatchAnnotationError(f"{where}: must be an object or null, got {_json_type(data)}")
    allocs = _field(data, "allocations")
    if allocs is None:
        return []
    if isinstance(allocs, _Object) or not isinstance(allocs, list):
        raise BatchAnnotationError(f"{where}: 'allocations' must be a list or null, got {_json_type(allocs)}")
    out: list[tuple[ThirdPartyAllocation, object]] = []
    for i, a in enumerate(allocs):
        at = f"{where}: allocations[{i}]"
        if a is None:
            out.append((ThirdPartyAllocation(), a))
            continue
        if not isinstance(a, _Object):
            raise BatchAnnotationError(f"{at}: must be an object or null, got {_json_type(a)}")
        entry = ThirdPartyAllocation(_string(_field(a, "name"), f"{at}.name"),
                                     _string(_field(a, "priority"), f"{at}.priority"),
                                     _resources(_field(a, "resources"), f"{at}.resources"))
        out.append((entry, a))
    return out


def third_party_allocations(text: object) -> tuple[ThirdPartyAllocation, ...]:
    """The entries of a `thirdPartyAllocations` value, as koord-manager reads them. Raises
    BatchAnnotationError, naming the entry and field, where Go's decoder fails."""
    return tuple(e for e, _ in _entries(text))


def parse_third_party_allocations(text: object) -> dict[str, Resources]:
    """Allocation name → its batch resources (entries of one name summed, as koord-manager sums them)."""
    out: dict[str, Resources] = {}
    for e in third_party_allocations(text):
        out[e.name] = out.get(e.name, Resources()) + e.resources
    return out


def _plain(v: object, where: str) -> object:
    """A decoded value back as plain JSON data (an object's duplicate members: the last, as Go keeps)."""
    if isinstance(v, _Object):
        return {k: _plain(x, where) for k, x in v}
    if isinstance(v, list):
        return [_plain(x, where) for x in v]
    if isinstance(v, Decimal):
        f = float(v)
        if f in (float("inf"), float("-inf")):
            raise BatchAnnotationError(f"{where}: number {v} is out of range")
        return int(v) if v == v.to_integral_value() and abs(v) < 2**63 else f
    return v


def allocation_entries(text: object) -> list[tuple[str, object]]:
    """(name as Go reads it, the entry's JSON value) for each entry: what a writer keeps of the others'.
    Raises BatchAnnotationError where Go's decoder fails: such a value is not for us to overwrite."""
    return [(e.name, _plain(raw, THIRD_PARTY_ANNOTATION)) for e, raw in _entries(text)]


def koord_batch_total(allocations: Iterable[ThirdPartyAllocation],
                      exclude: Collection[str] = ()) -> Resources:
    """Σ of the `koord-batch` entries, the ones koord-manager subtracts from the origin, except those named in
    `exclude`. Raises BatchAnnotationError for a counted entry outside [0, bound] (it cannot be counted)."""
    total = Resources()
    for i, e in enumerate(allocations):
        if e.priority != PRIORITY_BATCH or e.name in exclude:
            continue
        r = e.resources
        if not (0 <= r.milli_cpu <= MAX_MILLI_CPU and 0 <= r.memory_bytes <= MAX_MEMORY_BYTES):
            raise BatchAnnotationError(
                f"{THIRD_PARTY_ANNOTATION}: allocations[{i}] ({e.name!r}): {r.milli_cpu} {BATCH_CPU} / "
                f"{r.memory_bytes} {BATCH_MEMORY} is out of range "
                f"[0, {MAX_MILLI_CPU}] / [0, {MAX_MEMORY_BYTES}]")
        total = total + r
    return total


def third_party_allocations_json(yarn: Resources, name: str = "hadoop-yarn",
                                 priority: str = PRIORITY_BATCH) -> str:
    """The koordinator-compatible annotation value for YARN's allocations (batch-cpu milli, memory bytes)."""
    doc = {"allocations": [{
        "name": name,
        "priority": priority,
        "resources": {BATCH_CPU: str(max(0, yarn.milli_cpu)), BATCH_MEMORY: str(max(0, yarn.memory_bytes))},
    }]}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


# ---------------------------------------------------------------- originExtendedAllocatable


def _resource_pair(resources: object, where: str) -> Resources:
    if not isinstance(resources, Mapping):
        raise BatchAnnotationError(f"{where}: 'resources' must be an object, got {type(resources).__name__}")
    values: dict[str, int] = {}
    for name in (BATCH_CPU, BATCH_MEMORY):
        raw = resources.get(name, "0")
        try:
            v = to_int(raw)
        except QuantityError as err:
            raise BatchAnnotationError(f"{where}: {name}: {err}") from err
        bound = MAX_MILLI_CPU if name == BATCH_CPU else MAX_MEMORY_BYTES
        if not 0 <= v <= bound:
            raise BatchAnnotationError(f"{where}: {name}: {v} is out of range [0, {bound}]")
        values[name] = v
    return Resources(values[BATCH_CPU], values[BATCH_MEMORY])


def parse_origin_annotation(text: object) -> Resources:
    """`{"resources":{"kubernetes.io/batch-cpu":"<milli>","kubernetes.io/batch-memory":"<bytes>"}}`."""
    if not isinstance(text, str):
        raise BatchAnnotationError(f"{ORIGIN_ANNOTATION}: expected a JSON string, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise BatchAnnotationError(f"{ORIGIN_ANNOTATION}: {len(text)} characters, more than {MAX_TEXT}")
    try:
        data = json.loads(text)
    except ValueError as err:
        raise BatchAnnotationError(f"{ORIGIN_ANNOTATION}: not valid JSON: {err}") from err
    if not isinstance(data, Mapping) or "resources" not in data:
        raise BatchAnnotationError(f"{ORIGIN_ANNOTATION}: expected an object with 'resources'")
    return _resource_pair(data["resources"], ORIGIN_ANNOTATION)
