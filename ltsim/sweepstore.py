"""SQLite store for sweep results: one row per (scenario fingerprint, point), written as each point
finishes, so an interrupted sweep resumes where it stopped."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    scenario TEXT NOT NULL,      -- fingerprint of the base scenario (sha256 of its TOML)
    point TEXT NOT NULL,         -- canonical JSON of the overrides
    result TEXT NOT NULL,        -- JSON of the result row
    created_s REAL NOT NULL DEFAULT (julianday('now')),
    PRIMARY KEY (scenario, point)
)
"""


def fingerprint(raw: dict[str, Any]) -> str:
    """Stable hash of a scenario's merged TOML."""
    return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def point_key(overrides: dict[str, Any]) -> str:
    return json.dumps(overrides, sort_keys=True, default=str)


class SweepStore:
    """Results keyed by scenario and point; ``path=None`` keeps them in memory."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path) if path else ":memory:"
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(SCHEMA)
        self._conn.commit()

    def done(self, scenario: str) -> dict[str, dict[str, Any]]:
        """Finished points of a scenario: point key -> result row."""
        rows = self._conn.execute("SELECT point, result FROM results WHERE scenario = ?", (scenario,))
        return {point: json.loads(result) for point, result in rows}

    def put(self, scenario: str, overrides: dict[str, Any], result: dict[str, Any]) -> None:
        """Record one finished point (committed at once)."""
        self._conn.execute("INSERT OR REPLACE INTO results (scenario, point, result) VALUES (?, ?, ?)",
                           (scenario, point_key(overrides), json.dumps(result, default=str)))
        self._conn.commit()

    def close(self) -> None:
        self._conn.close()
