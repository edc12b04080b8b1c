"""The guest stage's results in the host's test run: one test here per test that ran in the cgroup v2 +
systemd guest, passing, failing (with the guest's message) or skipped as it did there, so the host's summary
is the one summary and a guest failure shows by name.

`bash scripts/test` runs the guest stage (scripts/vm-test) before the host's pytest and points
COLOC_GUEST_RESULTS at what it brought back. Without results the stage did not run: COLOC_SKIP_GUEST=1 says
it was skipped on purpose; COLOC_REQUIRE_GUEST=1 (CI) makes that a failure, as COLOC_REQUIRE_CGROUPS=1 does
for real cgroups; otherwise it is a skip that says why.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.guest


@dataclass(frozen=True)
class GuestCase:
    id: str  # the guest's node id, e.g. tests/vm/guest/test_guest_node.py::test_pure_v2_with_systemd_as_init
    outcome: str  # passed | failed | error | skipped
    message: str = ""


def _node_id(case: ET.Element) -> str:
    classname, name = case.get("classname", ""), case.get("name", "")
    parts = classname.split(".")
    # pytest's junit classname is the module path with dots, then any test class names
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if (Path(__file__).resolve().parents[2] / path).exists():
            return "::".join([path, *parts[i:], name])
    return f"{classname}::{name}"


def load_cases(junit: Path) -> list[GuestCase]:
    """Every test case of a pytest junit XML file, with its outcome and, unless it passed, its message."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = "failed" if tag == "failure" else tag
                text = (el.text or "").strip()
                message = el.get("message", "") + (f"\n{text}" if text and tag != "skipped" else "")
                break
        out.append(GuestCase(_node_id(case), outcome, message))
    return out


def _results() -> Path | None:
    where = os.environ.get("COLOC_GUEST_RESULTS")
    return Path(where) if where else None


def _run_info(results: Path) -> dict[str, object]:
    try:
        info = json.loads((results / "run.json").read_text())
    except (OSError, ValueError) as err:
        return {"error": f"no readable {results / 'run.json'}: {err}"}
    return info if isinstance(info, dict) else {"error": "run.json is not an object"}


def _cases() -> list[GuestCase]:
    results = _results()
    if results is None or not (results / "junit.xml").is_file():
        return []
    try:
        return load_cases(results / "junit.xml")
    except ET.ParseError:
        return []


CASES = _cases()


def test_the_guest_stage_ran() -> None:
    """The stage ran and its pytest finished (it may have failed tests, each reported below by name)."""
    results = _results()
    if results is None:
        if os.environ.get("COLOC_SKIP_GUEST") == "1":
            pytest.skip("COLOC_SKIP_GUEST=1: the cgroup v2 + systemd guest stage was not run")
        why = "the guest stage did not run in this test run (scripts/test runs it, scripts/vm-test alone)"
        if os.environ.get("COLOC_REQUIRE_GUEST") == "1":
            pytest.fail(f"COLOC_REQUIRE_GUEST=1 but {why}")
        pytest.skip(why)
    info = _run_info(results)
    if info.get("error"):
        msg = f"the guest stage failed: {info['error']} (logs in {results})"
        if os.environ.get("COLOC_REQUIRE_GUEST") == "1" or info.get("rc") is not None or CASES:
            pytest.fail(msg)
        pytest.skip(msg)
    if info.get("rc") not in (0, 1):
        pytest.fail(f"the guest's pytest ended with exit status {info.get('rc')} (not 0 or 1: an error "
                    f"outside the tests, or nothing collected); its output is {results / 'job.log'}")
    if not CASES:
        pytest.fail(f"the guest ran no test ({results / 'junit.xml'} is missing, empty or unreadable)")
    print(f"guest: {len(CASES)} tests, boot {info.get('boot_s')} s, stage {info.get('wall_s')} s, "
          f"kernel {info.get('kernel')}")


if CASES:  # one host test per guest test (none without results: test_the_guest_stage_ran says why)

    @pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
    def test_in_guest(case: GuestCase) -> None:
        if case.outcome == "skipped":
            pytest.skip(f"skipped in the guest: {case.message}")
        if case.outcome != "passed":
            pytest.fail(f"{case.outcome} in the guest: {case.message}", pytrace=False)
