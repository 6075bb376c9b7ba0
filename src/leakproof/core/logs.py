"""How the command line logs: text lines for people, or one JSON object per record.

With ``--log-format json`` every record leakproof's Python code logs on the driver is one
JSON object on one line -- ``time`` (ISO 8601, UTC, ms), ``level``, ``logger``, ``message``,
``exception`` when there is one -- and the per-batch progress record carries its figures as
fields of that object (``batch_ms``, ``records``, ...), so a log shipper indexes them without
parsing a message. Spark's own JVM log lines are log4j's, configured by Spark.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

FIELDS = "fields"  # a record's ``extra`` key whose dict goes into the JSON object as it is
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str, log_format: str = "text") -> None:
    """The root logger to standard error at ``level``, as text or JSON; the chatty client
    libraries at WARNING."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json"
                         else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fail(message: str, log_format: str) -> None:
    """The command line's last word on a failure: a plain line, or with JSON logs an ERROR
    record like every other (``leakproof.cli``)."""
    if log_format == "json":
        logging.getLogger("leakproof.cli").error("%s", message)
    else:
        print(message, file=sys.stderr)
