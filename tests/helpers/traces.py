"""The public traces in tests/data/traces: real OpenAI-format conversations. Never edited.

They are copies, byte for byte, of other people's recorded agent runs (sources, commits and
licences in tests/data/traces/README.md and licenses/), so the suite needs nothing beside the
checkout.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

TRACES_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"


def trace_paths() -> list[Path]:
    """Every trace file (not the .meta.json files), sorted by name."""
    paths = sorted(p for p in TRACES_DIR.glob("*.json") if not p.name.endswith(".meta.json"))
    if not paths:
        raise RuntimeError(f"no traces found in {TRACES_DIR}; the checkout is incomplete")
    return paths


def trace_names() -> list[str]:
    return [p.stem for p in trace_paths()]


@cache
def _load(name: str) -> str:
    return (TRACES_DIR / f"{name}.json").read_text(encoding="utf-8")


def load_trace(name: str) -> list[dict[str, Any]]:
    """A fresh copy of the raw message dicts of trace ``name`` (safe to mutate)."""
    data: list[dict[str, Any]] = json.loads(_load(name))
    return data


def load_meta(name: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((TRACES_DIR / f"{name}.meta.json").read_text("utf-8"))
    return meta
