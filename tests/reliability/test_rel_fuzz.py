"""Fuzzing the agent's input parsers: every input gives a valid answer or the parser's own clear error.

Hypothesis drives the config loader, the kubelet's PodList parser, the NodeManager's three payload parsers,
the YARN/pod id parsers and the cgroup path check with random and mutated inputs. Nothing may escape but the
documented error type, and no accepted cgroup path may point outside the root. Bounded for CI by
`max_examples`; run longer by hand with `COLOC_FUZZ_EXAMPLES=20000 pytest tests/reliability/test_rel_fuzz.py`.
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agent.config.agent import AgentConfig, load_config
from agent.config.load import ConfigError
from agent.sources.kubelet import PodListError, parse_pod_list
from agent.sources.yarn import NmPayloadError, parse_apps, parse_containers, parse_node_info
from cgroups.errors import PathOutsideRoot
from cgroups.layout import Layout
from cgroups.paths import check_rel
from qos.ids import IdError, check_pod_uid, parse_app_id, parse_container_id

FIX = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLES = int(os.environ.get("COLOC_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=30,
)


def _paths(doc: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(doc: object, data: st.DataObject) -> object:
    """Replace one node of a real payload (chosen by hypothesis) with a random JSON value."""
    doc = copy.deepcopy(doc)
    where = data.draw(st.sampled_from(_paths(doc)))
    value = data.draw(json_values)
    if not where:
        return value
    node = doc
    for step in where[:-1]:
        node = node[step]  # type: ignore[index]
    node[where[-1]] = value  # type: ignore[index]
    return doc


PODLISTS = [json.loads(p.read_text()) for p in sorted((FIX / "kubelet").glob("*.json"))]


@FUZZ
@given(st.data())
def test_podlist_parser_answers_or_names_the_problem(data: st.DataObject) -> None:
    doc = _mutate(data.draw(st.sampled_from(PODLISTS)), data)
    try:
        pods, rejected = parse_pod_list(doc, Layout("cgroupfs"))
    except PodListError as err:
        assert str(err)
        return
    assert all(isinstance(r, str) and r for r in rejected)
    for p in pods:
        check_rel(p.workload.cgroup)  # an accepted pod's cgroup stays inside the root


NM_DIRS = [d for d in sorted((FIX / "nodemanager").iterdir()) if d.is_dir()]


def _nm(name: str) -> list[object]:
    return [json.loads((d / name).read_text()) for d in NM_DIRS if (d / name).exists()]


@FUZZ
@given(st.data())
def test_nodemanager_parsers_answer_or_name_the_problem(data: st.DataObject) -> None:
    for name, parse in (("containers.json", parse_containers), ("apps.json", parse_apps),
                        ("info.json", parse_node_info)):
        docs = _nm(name)
        if not docs:
            continue
        doc = _mutate(data.draw(st.sampled_from(docs)), data)
        try:
            parse(doc)  # type: ignore[operator]
        except NmPayloadError as err:
            assert str(err)


@FUZZ
@given(st.one_of(st.text(max_size=80),
                 st.from_regex(r"container_(e\d{1,3}_)?\d{1,14}_\d{1,6}_\d{1,3}_\d{1,9}"),
                 st.from_regex(r"application_\d{1,14}_\d{1,6}"), st.integers(), st.none()))
def test_id_parsers_accept_or_refuse_cleanly(value: object) -> None:
    for parse in (check_pod_uid, parse_app_id, parse_container_id):
        try:
            out = parse(value)
        except IdError as err:
            assert str(err)
            continue
        text = out if isinstance(out, str) else str(value)
        assert "/" not in text and ".." not in text and "\x00" not in text


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("ab./\x00-_ ")), max_size=30))
def test_cgroup_path_check_never_lets_a_path_out(rel: str) -> None:
    try:
        ok = check_rel(rel)
    except PathOutsideRoot as err:
        assert str(err)
        return
    joined = posixpath.normpath(posixpath.join("/root", ok))
    assert joined == "/root" or joined.startswith("/root/"), (rel, ok)


CONFIG_KEYS = ["node", "cgroups", "loop", "eviction", "state", "api", "metrics", "sources", "policy", "batch",
               "standalone", "protection", "drain", "network"]


@FUZZ
@given(st.one_of(
    st.binary(max_size=300),
    st.dictionaries(st.sampled_from(CONFIG_KEYS), json_values, max_size=4).map(
        lambda d: json.dumps(d, default=str).encode()),
))
@example(raw=b"\x00")  # found by this test: the YAML reader's own error escaped the loader
@example(raw=b'{"node": {"a\\nb": 1}}')  # found by this test: a field name with a newline broke the one line
@pytest.mark.parametrize("suffix", [".yaml"])
def test_config_loader_gives_a_config_or_one_clear_error(tmp_path_factory: pytest.TempPathFactory,
                                                         suffix: str, raw: bytes) -> None:
    path = tmp_path_factory.mktemp("cfg") / f"agent{suffix}"
    path.write_bytes(raw)
    try:
        cfg = load_config(path)
    except ConfigError as err:
        msg = str(err)
        assert msg and "\n" not in msg.strip() and len(msg) < 2000, msg[:300]
        return
    assert isinstance(cfg, AgentConfig)


def test_found_by_fuzzing_containerids_that_is_not_a_list_is_a_reason() -> None:
    """Found by the fuzzer above: `containerids: 5` raised TypeError out of the NodeManager parser."""
    apps, rejected = parse_apps({"apps": {"app": [{"id": "application_1700000000000_0001", "state": "RUNNING",
                                                   "containerids": 5}]}})
    assert apps == {} and "containerids: expected a list" in rejected[0]
