"""Structured logs: one JSON object per line (ts, level, component, message, fields), or human text on a TTY.

setup_logging("info")                        # JSON unless stderr is a terminal
log = get_logger("loop")
log.info("evicted", key="k8s/0b1c", reason="memory_pressure", release_bytes=1 << 30)
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Mapping
from typing import IO, Literal

Format = Literal["auto", "json", "text"]

ROOT = "coloc"
_FIELDS_ATTR = "fields"  # the same attribute `extra={"fields": {...}}` sets
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _clean(value: object) -> object:
    """Make a field value JSON-safe: non-finite floats and unknown objects become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_clean(v) for v in value]
    return str(value)


def _component(record: logging.LogRecord) -> str:
    name = record.name
    return name[len(ROOT) + 1 :] if name.startswith(ROOT + ".") else name


def _timestamp(created: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{whole}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; the message never spans lines because JSON escapes newlines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = dict(getattr(record, _FIELDS_ATTR, None) or {})
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        obj = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "component": _component(record),
            "message": record.getMessage(),
            "fields": _clean(fields),
        }
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`HH:MM:SS.mmm LEVEL component: message key=value ...` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS_ATTR, None) or {}
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        pairs = " ".join(f"{k}={json.dumps(_clean(v), ensure_ascii=False)}" for k, v in fields.items())
        line = f"{clock}.{int(record.created % 1 * 1000):03d} {record.levelname:<7} {_component(record)}: "
        line += record.getMessage() + (f"  {pairs}" if pairs else "")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class StructLogger:
    """A logger that takes structured fields as keyword arguments."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger

    def _log(self, level: int, message: str, fields: dict[str, object], exc_info: bool = False) -> None:
        if self.logger.isEnabledFor(level):
            self.logger.log(
                level, "%s", message, exc_info=exc_info, extra={_FIELDS_ATTR: fields}, stacklevel=3
            )

    def debug(self, message: str, **fields: object) -> None:
        self._log(logging.DEBUG, message, fields)

    def info(self, message: str, **fields: object) -> None:
        self._log(logging.INFO, message, fields)

    def warning(self, message: str, **fields: object) -> None:
        self._log(logging.WARNING, message, fields)

    def error(self, message: str, **fields: object) -> None:
        self._log(logging.ERROR, message, fields)

    def exception(self, message: str, **fields: object) -> None:
        """Log at error level with the current exception's traceback in `fields.exception`."""
        self._log(logging.ERROR, message, fields, exc_info=True)


def get_logger(component: str) -> StructLogger:
    """A structured logger for one component (`loop`, `metrics`, `executor.k8s`, ...)."""
    return StructLogger(logging.getLogger(f"{ROOT}.{component}"))


class _OurHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler `setup_logging` installed, so a second call replaces it instead of adding one."""


def setup_logging(
    level: str = "info", fmt: Format = "auto", stream: IO[str] | None = None
) -> logging.Handler:
    """Send every log record (ours and libraries') to `stream` (stderr) as JSON lines or human text.

    `fmt="auto"` picks text when the stream is a terminal, JSON otherwise. Calling it again replaces the
    handler it installed before. Raises ValueError naming a bad level or format.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"log level: expected one of {', '.join(_LEVELS)}, got {level!r}")
    if fmt not in ("auto", "json", "text"):
        raise ValueError(f"log format: expected auto, json or text, got {fmt!r}")
    out = stream if stream is not None else sys.stderr
    if fmt == "auto":
        isatty = getattr(out, "isatty", None)
        fmt = "text" if callable(isatty) and isatty() else "json"
    handler = _OurHandler(out)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level.lower()])
    return handler
