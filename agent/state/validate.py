"""Checks on what schedulers send; every error names the request field (as the proto spells it)."""

from __future__ import annotations

import re

from agent.state.errors import InvalidRequest
from agent.state.records import AdmitRequest, Tags
from qos.ids import IdError, check_pod_uid, parse_app_id, parse_container_id
from qos.model import Source

MAX_EPOCH = (1 << 63) - 1
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
    try:
        if source is Source.K8S:
            check_pod_uid(rest)
        elif source is Source.YARN:
            parse_container_id(rest)
    except IdError as err:
        raise InvalidRequest(field, str(err)) from None
    if source is Source.LOCAL:
        parts = rest.split("/")
        if len(rest) > 255 or not all(_LOCAL_SEGMENT.match(p) and p not in (".", "..") for p in parts):
            raise InvalidRequest(field, f"expected 'local/<relative cgroup path>', got {key!r}")


def check_admit(req: AdmitRequest) -> None:
    """Every field of an Admit request; the first one wrong raises InvalidRequest naming it."""
    check_key(req.key, req.source)
    _check_application(req)
    _check_resources(req)
    _check_labels(req)
    _check_tags(req.tags)


def _check_application(req: AdmitRequest) -> None:
    if not _TEXT.match(req.application_id):
        raise InvalidRequest("allocation.application_id",
                             f"must be 1-253 printable characters without spaces, got {req.application_id!r}")
    if req.source is Source.YARN:
        try:
            app = parse_app_id(req.application_id)
        except IdError as err:
            raise InvalidRequest("allocation.application_id", str(err)) from None
        if parse_container_id(req.key.partition("/")[2]).app_id != app:
            raise InvalidRequest("allocation.application_id",
                                 f"{req.application_id!r} is not the application of container {req.key!r}")


def _check_resources(req: AdmitRequest) -> None:
    r = req.resources
    if not 0 <= r.milli_cpu <= MAX_MILLI_CPU:
        raise InvalidRequest("allocation.resources.milli_cpu",
                             f"must be in [0, {MAX_MILLI_CPU}], got {r.milli_cpu}")
    if not 0 <= r.memory_bytes <= MAX_MEMORY:
        raise InvalidRequest("allocation.resources.memory_bytes",
                             f"must be in [0, {MAX_MEMORY}], got {r.memory_bytes}")
    if r.milli_cpu == 0 and r.memory_bytes == 0:
        raise InvalidRequest("allocation.resources", "must request some CPU or memory")


def _check_labels(req: AdmitRequest) -> None:
    """Priority, request id, name and namespace: what identifies the allocation to people."""
    if not -(1 << 31) <= req.priority < (1 << 31):
        raise InvalidRequest("allocation.priority", f"must fit in int32, got {req.priority}")
    if req.request_id and not _TEXT.match(req.request_id):
        raise InvalidRequest("allocation.request_id", "must be 1-253 printable characters without spaces")
    for value, field in ((req.name, "allocation.name"), (req.namespace, "allocation.namespace")):
        if len(value) > 253 or any(not c.isprintable() for c in value):
            raise InvalidRequest(field, "must be at most 253 printable characters")


def _check_tags(tags: Tags) -> None:
    if len(tags) > MAX_TAGS:
        raise InvalidRequest("allocation.tags", f"at most {MAX_TAGS} tags, got {len(tags)}")
    for k, v in tags:
        if not _TAG_KEY.match(k):
            raise InvalidRequest("allocation.tags", f"bad tag key {k[:40]!r}")
        if len(v) > MAX_TAG_VALUE:
            raise InvalidRequest("allocation.tags", f"value of {k!r} is longer than {MAX_TAG_VALUE}")
