"""A real Prometheus server for tests: started on a free localhost port, data in a temporary directory.

    with PrometheusServer(tmp_path, targets=["127.0.0.1:9316"]) as prom:
        prom.wait_for_scrape()
        prom.value('coloc_ticks_total') -> 7.0

    PrometheusServer(tmp_path, targets=[...], scrape_configs=[job, ...])   # the jobs given, as they are

Uses the `prometheus` binary (Debian package `prometheus`). `available()` says whether it is installed.
Debian builds it without the Kubernetes service discovery: a shipped job's `kubernetes_sd_configs` has to be
replaced by `static_configs` carrying the `__meta_kubernetes_*` labels it would give (see
`static_kubernetes_pod`).
Shuts down with SIGTERM (SIGKILL after 10 s) and leaves nothing running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kit.ports import free_port

BINARY = "prometheus"


def available() -> bool:
    return shutil.which(BINARY) is not None


class PrometheusError(RuntimeError):
    pass


def static_kubernetes_pod(job: dict[str, Any], address: str, meta: dict[str, str],
                          interval: str | None = None) -> dict[str, Any]:
    """A copy of the scrape `job` with its `kubernetes_sd_configs` (role pod) replaced by one static target at
    `address` carrying the `__meta_kubernetes_*` labels of `meta` (short names: `pod_node_name` stands for
    `__meta_kubernetes_pod_node_name`), so the job's own relabelling runs on them; `interval` replaces its
    scrape interval and timeout."""
    out = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    roles = [sd.get("role") for sd in job.get("kubernetes_sd_configs", [])]
    if roles != ["pod"]:
        raise PrometheusError(f"expected one kubernetes_sd_configs of role pod, got {roles}")
    labels = {f"__meta_kubernetes_{k}": v for k, v in meta.items()}
    out["static_configs"] = [{"targets": [address], "labels": labels}]
    if interval is not None:
        out["scrape_interval"] = out["scrape_timeout"] = interval
    return out


class PrometheusServer:
    """One Prometheus process scraping `targets` every `scrape_interval` under job `job`, or running the
    `scrape_configs` given (each target of them counted in `targets` for `wait_for_scrape`)."""

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str],
        *,
        job: str = "coloc-agent",
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        scrape_configs: Sequence[dict[str, Any]] | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.workdir = Path(workdir) / f"prometheus-{free_port()}"
        self.targets = list(targets)
        self.job = job
        self.scrape_interval = scrape_interval
        self.rule_files = [Path(p) for p in rule_files]
        self.scrape_configs = list(scrape_configs) if scrape_configs is not None else None
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "prometheus.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": self.scrape_configs if self.scrape_configs is not None else [
                {
                    "job_name": self.job,
                    "scrape_interval": self.scrape_interval,
                    "scrape_timeout": self.scrape_interval,
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        for attempt in range(3):
            self.port = free_port()
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    [
                        BINARY,
                        f"--config.file={config_path}",
                        f"--storage.tsdb.path={self.workdir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            if self._wait_ready():
                return self
            self.stop()
            if attempt == 2:
                break
        raise PrometheusError(f"prometheus did not become ready; log:\n{self.log()[-3000:]}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- HTTP API ----------------------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as err:
            raise PrometheusError(f"{path} {params}: HTTP {err.code}: {err.read()[:500]!r}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body}")
        return body["data"]

    def alerts(self, name: str | None = None, state: str | None = None) -> list[dict[str, Any]]:
        """Prometheus's own list of active alerts (`/api/v1/alerts`: pending and firing), optionally only
        those named `name` and in `state`."""
        found: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return [a for a in found if (name is None or a["labels"].get("alertname") == name)
                and (state is None or a["state"] == state)]

    def wait_for_alert(self, name: str, state: str = "firing", timeout_s: float = 30.0,
                       **labels: str) -> dict[str, Any]:
        """Poll /api/v1/alerts until alert `name` is in `state` with `labels`; raise with what is active."""
        deadline = time.monotonic() + timeout_s
        active: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            active = self.alerts()
            for a in active:
                if (a["labels"].get("alertname") == name and a["state"] == state
                        and labels.items() <= a["labels"].items()):
                    return a
            time.sleep(0.2)
        raise PrometheusError(f"{name} not {state} with {labels} in {timeout_s} s; active: {active}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; each result is {"metric": {...labels}, "value": [ts, "string value"]}."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: expected a vector, got {data['resultType']}")
        result: list[dict[str, Any]] = data["result"]
        return result

    def value(self, expr: str) -> float | None:
        """The single value of `expr` now, or None when it has no result; raises if it has several."""
        result = self.query(expr)
        if not result:
            return None
        if len(result) > 1:
            raise PrometheusError(f"{expr}: {len(result)} series, expected one")
        return float(result[0]["value"][1])

    def wait_until(
        self, expr: str, predicate: Callable[[float | None], bool], timeout_s: float = 30.0
    ) -> float | None:
        """Poll `expr` until `predicate(value)` holds; raise with the last value and the targets otherwise."""
        deadline = time.monotonic() + timeout_s
        last: float | None = None
        while time.monotonic() < deadline:
            last = self.value(expr)
            if predicate(last):
                return last
            time.sleep(0.2)
        targets = self.api("targets")
        raise PrometheusError(f"{expr}: condition not met in {timeout_s} s (last {last}); targets: {targets}")

    def wait_for_scrape(self, timeout_s: float = 30.0) -> None:
        """Wait until every target was scraped successfully at least once."""
        want = len(self.targets)
        self.wait_until(f'count(up{{job="{self.job}"}} == 1)', lambda v: v == want, timeout_s)
