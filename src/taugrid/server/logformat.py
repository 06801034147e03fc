"""The server's log lines as JSON (``--log-format json``): one object per line, for a log
pipeline (Loki, Elasticsearch, a cloud's log service) to index without parsing text.

Stdlib only. The fields are the ones every line has (time in RFC 3339 UTC, level,
logger, message) and, when a line carries one, the exception's traceback as one string.
Secrets never reach a log line in the first place (the workloads' output is masked
before it is stored, and nothing logs a token); this formatter adds nothing of its own.
"""

from __future__ import annotations

import json
import logging
import time


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def use_json_lines() -> None:
    """Every handler of the root logger writes JSON from now on."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter())
