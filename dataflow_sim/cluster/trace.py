"""Chrome-trace / Perfetto JSON timelines ("X" complete events; times in µs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["Trace"]


class Trace:
    """Collects spans; ``pid`` groups rows (a replica or a pipeline), ``tid`` is the row."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._names: dict[tuple[str, Any], str] = {}

    def span(self, name: str, cat: str, start_s: float, dur_s: float, pid: Any, tid: Any,
             **args: Any) -> None:
        """One span from ``start_s`` lasting ``dur_s`` seconds."""
        self.events.append({"name": name, "cat": cat, "ph": "X", "ts": start_s * 1e6,
                            "dur": dur_s * 1e6, "pid": str(pid), "tid": str(tid),
                            **({"args": args} if args else {})})

    def to_chrome(self) -> dict[str, Any]:
        """The ``{"traceEvents": [...]}`` object chrome://tracing and ui.perfetto.dev open."""
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_chrome()))
        return p
