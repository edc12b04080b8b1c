"""Names vulture reports as unused, each kept for a stated reason (run by scripts/test).

Anything vulture finds that is not here is dead code: delete it with its tests.
"""
# ruff: noqa: B018
_ = object()

# Read by the tests, which check on real bpf(2) how many programs of ours are attached.
_.ours_attached  # agent/executors/cgroup_skb.py

# Read by a library: pyroute2's forked netns child (agent/executors/htb.py says why it is set).
_.disable_mp_signal

# Called by a framework, not by our code.
_.et, _.tb  # agent/api/client.py: the __aexit__ signature
_.denied  # agent/api/authz.py: set on the servicer context, read by the audit log record

# Fields of records: filled by parsers, read through dataclasses.asdict / the proto conversion / status.
_.container_ids, _.batch_requests, _.known_to_nm  # agent/sources/result.py: PodInfo, YarnContainerInfo
_.started_at_ms  # agent/sources/yarn.py: NmContainer, as the NodeManager reports it
_.events_applied  # agent/recovery/cluster.py: recovery progress printed by `recover --verbose`
_.events_applied
_.originators  # agent/recovery/yunikorn.py: per-application originator map of the mapping record
_.si_messages  # agent/recovery/yunikorn.py: si_stream collected in memory, for the tests and small clusters
_.time_left_s  # qos/drain.py: DrainDecision, shown by `status` while draining
_.packets, _.drops  # agent/executors/htb_tree.py: tc class stats as the kernel reports them
_.pod_uid  # cgroups/layout.py: ParsedPath, what a cgroup path names
_.free_bytes  # cgroups/parsers.py: MemInfo
_.memory_usage_bytes  # cgroups/reader.py: CgroupSample
_.skipped, _.last_write_latency_s  # cgroups/writer.py: WriterStats

# The kernel interface's own API (cgroups/ is a library the agent, the demo, benches and tests use).
_.freeze  # cgroups/writer.py: freezer, used by the executor tests and the demo's pause
_.move_pid  # cgroups/writer.py: benches and tests place processes in cgroups
_.kubepods_dir  # cgroups/layout.py: the root on a real node (`inspect` and the layout tests)
_.utilisation  # cgroups/node.py: node CPU figure, used by `inspect`
_.memory_pressure  # cgroups/reader.py: memory PSI of a sample, read by `inspect`
_.format_psi, _.read_size  # cgroups/parsers.py, reader.py: PSI formatting and sizes for `inspect`/benches

# Public API for callers outside the daemon.
_.watch_raw  # agent/api/client.py: raw Watch bytes for schedulers that decode themselves (bench/recovery)
_.get_logger  # agent/daemon/logs.py: the structured logger for embedders of the daemon

# Observed by the loop's own tests and the interference bench (fast-path wake-up counts).
_.wakeups
_.psi_wakeups
_.last_snapshot  # agent/daemon/loop.py: the bench reads the last snapshot it acted on

# cgroups/systemd.py: read back by the guest tests (a unit's properties after SetUnitProperties)
_.unit_properties

_.blkio_source  # agent/sources/nodeslo_map.py: ResourceQos, where the blkio settings came from, as the others
