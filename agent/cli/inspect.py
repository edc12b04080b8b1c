"""`coloc-agent inspect`: sample the machine's cgroups over a short window and print them as a table."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cgroups.discovery import DRIVERS, Hierarchy, detect_driver, discover
from cgroups.errors import CgroupError, CgroupGone
from cgroups.layout import Layout
from cgroups.paths import check_rel
from cgroups.reader import CgroupReader, CgroupSample, cpu_milli, throttled_ratio


@dataclass(frozen=True, slots=True)
class Row:
    cgroup: str
    depth: int
    tier: str
    workload_class: str  # HP | BE | YARN | "" for the root and the tiers themselves
    cpu_cores: float
    throttled_pct: float | None
    working_set_bytes: int | None
    psi_cpu_some_avg10: float | None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="coloc-agent inspect",
        description="Sample the cgroups under the root twice and print CPU, throttling, memory and PSI.",
    )
    ap.add_argument(
        "--cgroup-root",
        help="root inside each hierarchy, e.g. kubepods (default: kubepods.slice or kubepods if present, "
        "else the whole hierarchy); an absolute path under a cgroup mount also works",
    )
    ap.add_argument("--mount", type=Path, help="read this cgroup v2 directory instead of discovering mounts")
    ap.add_argument("--mountinfo", default="/proc/self/mountinfo", help=argparse.SUPPRESS)
    ap.add_argument("--interval", type=float, default=1.0, help="sampling window in seconds (default 1)")
    ap.add_argument("--driver", choices=DRIVERS, help="kubelet cgroup driver (default: detected)")
    ap.add_argument("--max-depth", type=int, default=5, help="how deep below the root to list (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return ap


def _resolve_root(hierarchy: Hierarchy, given: str | None) -> str:
    top = hierarchy.controller_dir("cpu")
    if given is None:
        for candidate in ("kubepods.slice", "kubepods"):
            if (top / candidate).is_dir():
                return candidate
        return ""
    if given.startswith("/"):
        path = Path(given)
        for mount in hierarchy.mounts():
            if path == mount or mount in path.parents:
                return str(path.relative_to(mount)) if path != mount else ""
        mounts = ", ".join(str(m) for m in hierarchy.mounts())
        raise CgroupError(f"--cgroup-root {given} is not under a cgroup mount ({mounts})")
    return check_rel(given, "--cgroup-root")


def _classify(layout: Layout, rel: str) -> tuple[str, str]:
    ident = layout.identify(rel)
    if ident.kind == "root":
        return "", ""
    if ident.kind == "tier":
        return ident.tier, ""
    in_yarn_container = f"/{layout.yarn_hierarchy}/container_" in f"/{rel}"
    if ident.kind == "yarn" or (ident.tier == "besteffort" and in_yarn_container):
        return ident.tier, "YARN"
    return ident.tier, "BE" if ident.tier == "besteffort" else "HP"


def collect(reader: CgroupReader, layout: Layout, interval: float, max_depth: int) -> list[Row]:
    """Two samples of every cgroup under the root, `interval` apart; vanished cgroups are left out."""
    rels = reader.walk("", max_depth)
    first: dict[str, CgroupSample] = {}
    for rel in rels:
        try:
            first[rel] = reader.sample(rel)
        except CgroupGone:
            continue
    time.sleep(interval)
    rows: list[Row] = []
    for rel, prev in first.items():
        try:
            cur = reader.sample(rel)
        except CgroupGone:
            continue
        ratio = throttled_ratio(prev, cur)
        psi = cur.cpu_pressure
        tier, cls = _classify(layout, rel)
        rows.append(
            Row(
                cgroup=rel or ".",
                depth=rel.count("/") + 1 if rel else 0,
                tier=tier,
                workload_class=cls,
                cpu_cores=round(cpu_milli(prev, cur) / 1000, 3),
                throttled_pct=None if ratio is None else round(ratio * 100, 1),
                working_set_bytes=cur.memory_working_set_bytes,
                psi_cpu_some_avg10=None if psi is None else psi.some_avg10,
            )
        )
    return rows


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}Mi"


def render(rows: list[Row]) -> str:
    header = ("TIER", "CLASS", "CGROUP", "CPU", "THROTTLED", "WORKING SET", "PSI CPU")
    table = [header] + [
        (
            r.tier or "-",
            r.workload_class or "-",
            "  " * max(0, r.depth - 1) + (r.cgroup.rsplit("/", 1)[-1] if r.depth else "."),
            f"{r.cpu_cores:.3f}",
            "-" if r.throttled_pct is None else f"{r.throttled_pct:.1f}%",
            _mib(r.working_set_bytes),
            "-" if r.psi_cpu_some_avg10 is None else f"{r.psi_cpu_some_avg10:.2f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    right = {3, 4, 5, 6}
    out = []
    for line in table:
        pairs = enumerate(zip(line, widths, strict=True))
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in pairs]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.interval <= 0:
        print("inspect: --interval must be > 0", file=sys.stderr)
        return 2
    try:
        hierarchy = Hierarchy.v2(args.mount) if args.mount else discover(args.mountinfo)
        root = _resolve_root(hierarchy, args.cgroup_root)
        kubepods = (root.rsplit("/", 1)[-1].removesuffix(".slice") if root else "") or "kubepods"
        try:
            driver = detect_driver(hierarchy, kubepods, root=root if root else None, override=args.driver)
        except CgroupError:
            driver = "cgroupfs"  # nothing kubelet-shaped here: every cgroup is listed as HP
        layout = Layout(driver, kubepods=kubepods)
        with CgroupReader(hierarchy, root) as reader:
            if not reader.exists(""):
                raise CgroupError(f"cgroup root {root!r} does not exist in {reader.dir('')}")
            rows = collect(reader, layout, args.interval, args.max_depth)
    except (CgroupError, ValueError, OSError) as e:
        print(f"inspect: {e}", file=sys.stderr)
        return 1
    if args.json:
        doc = {
            "mode": hierarchy.mode,
            "root": root,
            "driver": driver,
            "interval_s": args.interval,
            "cgroups": [asdict(r) for r in rows],
        }
        print(json.dumps(doc))
    else:
        where = root or "/"
        print(f"# {hierarchy.mode} hierarchy, root {where!r}, {driver} layout, {args.interval:g}s window")
        print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
