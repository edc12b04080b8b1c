"""`coloc-agent run --config FILE`: the agent process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import logging
import os
import resource
import signal
import socket
import sys
from pathlib import Path

from agent.api.server import ApiServer, ApiStartError, start_api_server
from agent.config.agent import AgentConfig, ConfigError, read_config
from agent.daemon import resource_qos
from agent.daemon.logs import setup_logging
from agent.daemon.runtime import Runtime, StartError, build
from agent.metrics.server import MetricsServer
from cgroups.errors import CgroupError

log = logging.getLogger("coloc.run")

STARTUP_TRIM_AFTER_S = 5.0  # after the first ticks, whose allocations are start-up's too


def raise_fd_limit() -> None:
    """The reader keeps up to 7 fds per cgroup; a full node needs more than the usual soft limit of 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def release_startup_memory() -> None:
    """Return to the kernel the C heap that start-up (imports, config, first ticks) freed: ~1.3 MB of RSS
    on a heap that would otherwise keep it (bench/footprint.py)."""
    gc.collect()
    import ctypes  # only here: not otherwise on the run path

    with contextlib.suppress(OSError, AttributeError):  # glibc's; other C libraries may not have it
        ctypes.CDLL(None).malloc_trim(0)


async def _settle(task: asyncio.Future[None], what: str) -> None:
    """Wait for a task at shutdown; a failure is logged once, naming the task, and the shutdown goes on."""
    try:
        await task
    except Exception:
        log.warning("%s task ended with an error", what, exc_info=True)


async def _settle_each(tasks: list[tuple[asyncio.Future[None], str]]) -> None:
    for task, what in tasks:
        await _settle(task, what)


def start_limits(rt: Runtime, stop: asyncio.Event) -> list[tuple[asyncio.Future[None], str]]:
    """BE pods' batch limits (agent/daemon/batch_limits.py) and memory QoS / CPU burst
    (agent/daemon/resource_qos.py) as tasks, each that is on."""
    tasks: list[tuple[asyncio.Future[None], str]] = []
    if rt.limits is not None:
        tasks.append((asyncio.ensure_future(rt.limits.run(stop)), "batch limits"))
    if rt.resource_qos is not None:
        tasks.append((asyncio.ensure_future(rt.resource_qos.run(stop, rt.cfg.resource_qos.resync_s)),
                      "resource QoS"))
    return tasks


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="coloc-agent run", description="Run the co-location agent.")
    p.add_argument("--config", required=True, help="YAML config file (see examples/standalone.yaml)")
    p.add_argument("--dry-run", action="store_true", help="decide and record actions, apply none")
    return p.parse_args(argv)


async def serve(config_path: str, dry_run: bool = False, ready: asyncio.Event | None = None) -> int:
    loaded = read_config(config_path)
    cfg = loaded.config
    if dry_run:
        import dataclasses

        cfg = dataclasses.replace(cfg, eviction=dataclasses.replace(cfg.eviction, dry_run=True))
    setup_logging(cfg.log.level, cfg.log.format)
    if not loaded.keys:
        warn_all_defaults(config_path, cfg)
    raise_fd_limit()
    rt, metrics, api = await start(cfg, loaded.keys)
    ledger = rt.ledger
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    log.info("agent started", extra={"fields": {"node": cfg.node.node_name, "root": cfg.cgroups.root,
                                                  "dry_run": cfg.eviction.dry_run}})
    rt.egress_left.start()
    sources = asyncio.create_task(rt.sources.run(stop))
    reports = asyncio.create_task(rt.reports.run(stop))
    trim = loop.call_later(STARTUP_TRIM_AFTER_S, release_startup_memory)
    network = asyncio.create_task(rt.network.run(stop)) if rt.network is not None else None
    io = asyncio.create_task(rt.io.run(stop, rt.loop.wake)) if rt.io is not None else None
    limit_tasks = start_limits(rt, stop)
    try:
        if ready is not None:
            ready.set()
        await rt.loop.run(stop)
    finally:
        stop.set()
        trim.cancel()
        await _settle(sources, "sources")
        await _settle(reports, "node reports")
        await _settle_each(limit_tasks)
        await rt.executor.drain(timeout_s=cfg.eviction.grace_period_s + 2)
        rt.executor.release_be()
        await _stop_io(rt, io, cfg.eviction.dry_run)
        if network is not None:  # removes our egress tree (network.remove_on_exit) once `stop` is set
            await _settle(network, "network shaper")
        await rt.egress_left.exit(rt.network)
        await api.stop(2.0)
        if metrics is not None:
            metrics.stop()
        await ledger.close()
        rt.close()
        log.info("agent stopped")
    return 0


async def start(cfg: AgentConfig,
                file_keys: frozenset[str]) -> tuple[Runtime, MetricsServer | None, ApiServer]:
    """Every start step; a failing one is a `StartError` naming its setting, after undoing what this start
    made: the port, the state writer, the tiers, the state files it created."""
    fresh = fresh_state_files(cfg.state.path)
    try:
        rt = start_runtime(cfg, file_keys)
    except StartError:
        remove_fresh(fresh)
        raise
    ledger = rt.ledger
    metrics: MetricsServer | None = None
    try:
        ledger.start_persistence()
        if ledger.startup_problem:
            log.error("state file problem", extra={"fields": {"problem": ledger.startup_problem}})
        metrics = start_metrics(rt)
        try:
            api = await start_api_server(ledger, cfg.api, board=rt.board, settings=rt.settings.view,
                                         limits=lambda: resource_qos.held_limits(rt.limits, rt.resource_qos),
                                         trace=rt.trace)
        except ApiStartError as err:
            raise StartError(str(err)) from err
    except BaseException as err:
        if metrics is not None:
            metrics.stop()
        await ledger.close()
        rt.close(failed_start=True)
        remove_fresh(fresh)
        if isinstance(err, Exception) and not isinstance(err, StartError):
            log.debug("start-up failed", exc_info=True)
            raise StartError(f"{type(err).__name__}: {err}") from err
        raise
    return rt, metrics, api


async def _stop_io(rt: Runtime, task: asyncio.Task[None] | None, dry_run: bool) -> None:
    """Stop the disk guard and put back the caps it set (nothing was written under dry run)."""
    if task is None or rt.io is None:
        return
    await _settle(task, "disk guard")
    if not dry_run:
        rt.io.release()


def warn_all_defaults(config_path: str, cfg: AgentConfig) -> None:
    """An empty config file (or one of comments only) is valid and runs on every default: say so, once, with
    the defaults that decide where the agent acts."""
    log.warning("the config file sets no setting: the agent runs on every default "
                "(`coloc-agent config show` lists them)",
                extra={"fields": {"config": config_path, "cgroups.root": cfg.cgroups.root,
                                  "cgroups.setup_tiers": cfg.cgroups.setup_tiers,
                                  "api.socket_path": cfg.api.socket_path, "state.path": cfg.state.path,
                                  "metrics": f"{cfg.metrics.bind}:{cfg.metrics.port}"}})


def fresh_state_files(state_path: str) -> list[Path]:
    """The state file, its journal, its epoch file and its directory as far as they do not exist yet: what a
    failed start made there and removes (one that was there before is an earlier run's state: kept)."""
    if not state_path:
        return []
    state = Path(state_path)
    paths = [state.parent, state, *(Path(f"{state_path}.{x}") for x in ("held", "epoch"))]
    return [p for p in paths if not p.exists()]


def remove_fresh(paths: list[Path]) -> None:
    """Remove what a failed start made in the state directory (files first, then the directory if empty)."""
    for p in sorted(paths, key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            p.rmdir() if p.is_dir() else p.unlink()


def start_runtime(cfg: AgentConfig, file_keys: frozenset[str] | None = None) -> Runtime:
    """`build`, every failure as a `StartError` (build has undone what it made)."""
    try:
        return build(cfg, file_keys=file_keys)
    except StartError:
        raise
    except (CgroupError, OSError, ValueError) as err:
        raise StartError(str(err)) from err
    except Exception as err:  # e.g. the network shaper's netlink errors: still one line, exit 2
        log.debug("start-up failed", exc_info=True)
        raise StartError(f"{type(err).__name__}: {err}") from err


def start_metrics(rt: Runtime) -> MetricsServer | None:
    """The /metrics server, bound now; a port it cannot have is a `StartError` naming the setting."""
    cfg, ledger = rt.cfg.metrics, rt.ledger
    if not cfg.enabled:
        return None
    try:
        return rt.metrics.start(rt.board, ledger_view=lambda: ledger.last_view,
                                persistence_error=lambda: ledger.persistence_error)
    except OSError as err:
        raise StartError(bind_error(cfg.bind_address, cfg.port, err)) from err


def bind_error(host: str, port: int, err: OSError) -> str:
    """Why `metrics.bind`:`metrics.port` cannot be bound, naming the setting at fault."""
    code = err.errno
    if isinstance(err, socket.gaierror):
        return f"metrics.bind {host}: {(err.strerror or str(err)).lower()}"
    if code == errno.EADDRNOTAVAIL:
        return f"metrics.bind {host}: {os.strerror(code).lower()} (no such address on this host)"
    why = os.strerror(code).lower() if code else str(err)
    return f"metrics.port {port}: {why} (on {host})"


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    setup_logging()
    try:
        return asyncio.run(serve(args.config, args.dry_run))
    except ConfigError as err:
        print(f"coloc-agent: invalid config: {err}", file=sys.stderr)
        return 2
    except StartError as err:
        print(f"coloc-agent: cannot start: {err}", file=sys.stderr)
        return 2
