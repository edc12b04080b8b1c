"""Structured logs: one JSON object per line, text on a real terminal (a pty), bad settings refused."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator

import pytest

from agent.daemon.logs import get_logger, setup_logging


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logs_are_one_object_per_line_with_the_fields() -> None:
    out = io.StringIO()
    setup_logging("debug", "json", stream=out)
    log = get_logger("executor.k8s")
    log.info("evicted\npod", key="k8s/0b1c", reason="memory_pressure", release_bytes=1 << 30)
    log.debug("odd values", ratio=float("nan"), cpus=(0, 1), where=object.__name__, nested={"a": [1, 2]})
    try:
        raise ValueError("cgroup went away")
    except ValueError:
        log.exception("write failed", file="cpu.max")
    logging.getLogger("urllib3.connectionpool").warning("retrying %s", "GET")

    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    records = [json.loads(line) for line in lines]
    for r in records:
        assert set(r) == {"ts", "level", "component", "message", "fields"}
        assert r["ts"].endswith("Z") and "T" in r["ts"]
    assert records[0] == {
        "ts": records[0]["ts"],
        "level": "info",
        "component": "executor.k8s",
        "message": "evicted\npod",
        "fields": {"key": "k8s/0b1c", "reason": "memory_pressure", "release_bytes": 1 << 30},
    }
    assert records[1]["fields"] == {
        "ratio": "nan",
        "cpus": [0, 1],
        "where": "object",
        "nested": {"a": [1, 2]},
    }
    assert records[2]["level"] == "error" and records[2]["fields"]["file"] == "cpu.max"
    assert "ValueError: cgroup went away" in records[2]["fields"]["exception"]
    assert (records[3]["component"], records[3]["message"]) == ("urllib3.connectionpool", "retrying GET")


def test_level_filters_and_a_second_setup_replaces_the_first() -> None:
    first, second = io.StringIO(), io.StringIO()
    setup_logging("info", "json", stream=first)
    setup_logging("warning", "json", stream=second)
    log = get_logger("loop")
    log.info("quiet")
    log.warning("loud", tick=3)
    assert first.getvalue() == ""
    assert [json.loads(line)["message"] for line in second.getvalue().splitlines()] == ["loud"]


def test_auto_format_is_text_on_a_terminal_and_json_elsewhere() -> None:
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            setup_logging("info", "auto", stream=tty)
            get_logger("metrics").info("listening", port=9316)
            tty.flush()
            text = os.read(master, 4096).decode()
    finally:
        os.close(master)
        os.close(slave)
    assert "INFO" in text and "metrics: listening" in text and "port=9316" in text
    assert not text.lstrip().startswith("{")

    pipe = io.StringIO()
    setup_logging("info", "auto", stream=pipe)
    get_logger("metrics").info("listening", port=9316)
    assert json.loads(pipe.getvalue())["fields"] == {"port": 9316}


@pytest.mark.parametrize(
    ("level", "fmt", "message"), [("loud", "json", "log level"), ("info", "xml", "log format")]
)
def test_bad_settings_are_refused_by_name(level: str, fmt: str, message: str) -> None:
    root = logging.getLogger()
    before = list(root.handlers)
    with pytest.raises(ValueError, match=message):
        setup_logging(level, fmt)  # type: ignore[arg-type]
    assert root.handlers == before
