"""Checks on what schedulers send; every error names the request field (as the proto spells it)."""

from __future__ import annotations

import re

from agent.state.errors import InvalidRequest
from agent.state.records import AdmitRequest
from qos.model import Source

MAX_EPOCH = (1 << 63) - 1
_UID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_YARN_CONTAINER = re.compile(r"^container_(?:e\d{1,9}_)?(\d{10,14})_(\d{4,9})_\d{2,9}_\d{6,12}$")
_YARN_APP = re.compile(r"^application_(\d{10,14})_(\d{4,9})$")
_LOCAL_SEGMENT = re.compile(r"^[A-Za-z0-9_.:@+-]{1,128}$")
_TEXT = re.compile(r"^[\x21-\x7e]{1,253}$")  # printable ASCII, no spaces
_TAG_KEY = re.compile(r"^[A-Za-z0-9_./-]{1,128}$")
MAX_TAGS = 32
MAX_TAG_VALUE = 1024
MAX_MILLI_CPU = 1 << 32
MAX_MEMORY = 1 << 52


def check_epoch(epoch: int, field: str = "fence.scheduler_epoch") -> None:
    if not 0 < epoch <= MAX_EPOCH:
        raise InvalidRequest(field, f"must be in [1, 2^63-1], got {epoch}")


def check_key(key: str, source: Source, field: str = "allocation.key") -> None:
    """`<source>/<id>` as the sources build Workload keys, so a launch is recognised when it starts."""
    prefix, sep, rest = key.partition("/")
    if not sep or prefix != source.value:
        raise InvalidRequest(field, f"must start with '{source.value}/' (the allocation's source), "
                                    f"got {key!r}")
    if source is Source.K8S and not _UID.match(rest):
        raise InvalidRequest(field, f"expected 'k8s/<pod uid>', got {key!r}")
    if source is Source.YARN and not _YARN_CONTAINER.match(rest):
        raise InvalidRequest(field, "expected 'yarn/container_[e<epoch>_]<ts>_<app>_<attempt>_<seq>', "
                                    f"got {key!r}")
    if source is Source.LOCAL:
        parts = rest.split("/")
        if len(rest) > 255 or not all(_LOCAL_SEGMENT.match(p) and p not in (".", "..") for p in parts):
            raise InvalidRequest(field, f"expected 'local/<relative cgroup path>', got {key!r}")


def check_admit(req: AdmitRequest) -> None:
    check_key(req.key, req.source)
    if not _TEXT.match(req.application_id):
        raise InvalidRequest("allocation.application_id",
                             f"must be 1-253 printable characters without spaces, got {req.application_id!r}")
    if req.source is Source.YARN:
        app = _YARN_APP.match(req.application_id)
        cont = _YARN_CONTAINER.match(req.key.partition("/")[2])
        if app is None or cont is None or app.groups() != cont.groups():
            raise InvalidRequest("allocation.application_id",
                                 f"{req.application_id!r} is not the application of container {req.key!r}")
    r = req.resources
    if not 0 <= r.milli_cpu <= MAX_MILLI_CPU:
        raise InvalidRequest("allocation.resources.milli_cpu",
                             f"must be in [0, {MAX_MILLI_CPU}], got {r.milli_cpu}")
    if not 0 <= r.memory_bytes <= MAX_MEMORY:
        raise InvalidRequest("allocation.resources.memory_bytes",
                             f"must be in [0, {MAX_MEMORY}], got {r.memory_bytes}")
    if r.milli_cpu == 0 and r.memory_bytes == 0:
        raise InvalidRequest("allocation.resources", "must request some CPU or memory")
    if not -(1 << 31) <= req.priority < (1 << 31):
        raise InvalidRequest("allocation.priority", f"must fit in int32, got {req.priority}")
    if req.request_id and not _TEXT.match(req.request_id):
        raise InvalidRequest("allocation.request_id", "must be 1-253 printable characters without spaces")
    for value, field in ((req.name, "allocation.name"), (req.namespace, "allocation.namespace")):
        if len(value) > 253 or any(not c.isprintable() for c in value):
            raise InvalidRequest(field, "must be at most 253 printable characters")
    if len(req.tags) > MAX_TAGS:
        raise InvalidRequest("allocation.tags", f"at most {MAX_TAGS} tags, got {len(req.tags)}")
    for k, v in req.tags:
        if not _TAG_KEY.match(k):
            raise InvalidRequest("allocation.tags", f"bad tag key {k[:40]!r}")
        if len(v) > MAX_TAG_VALUE:
            raise InvalidRequest("allocation.tags", f"value of {k!r} is longer than {MAX_TAG_VALUE}")
