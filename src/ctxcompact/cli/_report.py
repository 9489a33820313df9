"""What the commands print: text tables, the documented ``--json`` documents, the plot.

The JSON documents carry a ``schema`` string (``ctxcompact.<command>/1``); keys are only ever
added under the same version, never renamed or removed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import MissingDependencyError
from ._replay import FileReplay, ReplayStats

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ReplaySettings",
    "plot_replays",
    "replay_json",
    "replay_text",
    "stats_json",
]

_STAT_KEYS = (
    "calls",
    "compactions",
    "failed_compactions",
    "input_tokens",
    "peak_context_tokens",
    "cost",
    "cache_breaks",
    "summarizer_calls",
    "summarizer_tokens",
)


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """The knobs a replay ran with, echoed in its report."""

    strategy: str
    max_context_size: int
    reserved_context_size: int
    cached_price: float
    token_counter: str


def ratio(part: float, whole: float) -> float | None:
    """``part / whole``, or ``None`` when there is no whole to compare with."""
    return part / whole if whole else None


def stats_json(stats: ReplayStats, *, per_call: bool) -> dict[str, Any]:
    """One ``Stats`` object of the replay schema."""
    data: dict[str, Any] = {key: getattr(stats, key) for key in _STAT_KEYS}
    data["cost"] = round(stats.cost, 3)
    if per_call:
        data["context_tokens"] = list(stats.context_tokens)
    return data


def _ratios(compacted: ReplayStats, baseline: ReplayStats) -> dict[str, float | None]:
    return {
        key: _round(ratio(getattr(compacted, key), getattr(baseline, key)))
        for key in ("input_tokens", "peak_context_tokens", "cost")
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def total_of(replays: Sequence[FileReplay]) -> tuple[ReplayStats, ReplayStats]:
    """The compacted and baseline statistics summed over files."""
    compacted, baseline = ReplayStats(), ReplayStats()
    for item in replays:
        compacted += item.compacted
        baseline += item.baseline
    return compacted, baseline


def replay_json(settings: ReplaySettings, replays: Sequence[FileReplay]) -> dict[str, Any]:
    """The ``ctxcompact.replay/1`` document (see the README for every key)."""
    compacted, baseline = total_of(replays)
    return {
        "schema": "ctxcompact.replay/1",
        "settings": {
            "strategy": settings.strategy,
            "max_context_size": settings.max_context_size,
            "reserved_context_size": settings.reserved_context_size,
            "cached_price": settings.cached_price,
            "token_counter": settings.token_counter,
        },
        "files": [
            {
                "file": item.name,
                "messages": item.messages,
                "baseline": stats_json(item.baseline, per_call=True),
                "compacted": stats_json(item.compacted, per_call=True),
                "ratios": _ratios(item.compacted, item.baseline),
            }
            for item in replays
        ],
        "total": {
            "files": len(replays),
            "messages": sum(item.messages for item in replays),
            "baseline": stats_json(baseline, per_call=False),
            "compacted": stats_json(compacted, per_call=False),
            "ratios": _ratios(compacted, baseline),
        },
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float) -> str:
    return f"{value:,.0f}" if not isinstance(value, int) else f"{value:,}"


_ROWS = (
    ("model calls", "calls", False),
    ("compactions", "compactions", False),
    ("failed compactions", "failed_compactions", False),
    ("input tokens (sum)", "input_tokens", True),
    ("peak context tokens", "peak_context_tokens", True),
    ("cost, cache-adjusted", "cost", True),
    ("cache breaks", "cache_breaks", False),
    ("summarizer calls", "summarizer_calls", False),
    ("summarizer tokens", "summarizer_tokens", False),
)


def _block(title: str, label: str, compacted: ReplayStats, baseline: ReplayStats) -> list[str]:
    label = label if len(label) <= 24 else label[:23] + "…"
    lines = [title, f"  {'':<22}{'no compaction':>15}{label:>26}{'ratio':>9}"]
    for name, key, with_ratio in _ROWS:
        base, comp = getattr(baseline, key), getattr(compacted, key)
        shown = _pct(ratio(comp, base)) if with_ratio else ""
        lines.append(f"  {name:<22}{_num(base):>15}{_num(comp):>26}{shown:>9}")
    return lines


def replay_text(settings: ReplaySettings, replays: Sequence[FileReplay]) -> str:
    """The human-readable replay report."""
    head = (
        f"strategy {settings.strategy} | max context {settings.max_context_size:,} | "
        f"reserved {settings.reserved_context_size:,} | cached price {settings.cached_price:g} "
        f"| tokens: {settings.token_counter}"
    )
    lines = [head, ""]
    if len(replays) > 1:
        names = [_short_name(item.name) for item in replays]
        width = max(24, *(len(name) for name in names))
        lines.append(
            f"{'file':<{width}}  {'calls':>6}  {'compact.':>8}  {'input':>7}  {'peak':>7}"
            f"  {'cost':>7}  {'breaks':>6}"
        )
        for name, item in zip(names, replays, strict=True):
            c, b = item.compacted, item.baseline
            lines.append(
                f"{name:<{width}}  {c.calls:>6}  {c.compactions:>8}  "
                f"{_pct(ratio(c.input_tokens, b.input_tokens)):>7}  "
                f"{_pct(ratio(c.peak_context_tokens, b.peak_context_tokens)):>7}  "
                f"{_pct(ratio(c.cost, b.cost)):>7}  {c.cache_breaks:>6}"
            )
        lines.append("(input, peak and cost as a percentage of no compaction)")
        lines.append("")
        compacted, baseline = total_of(replays)
        title = f"total: {len(replays)} files, {sum(i.messages for i in replays):,} messages"
        lines += _block(title, settings.strategy, compacted, baseline)
    else:
        for item in replays:
            title = f"{item.name}: {item.messages} messages"
            lines += _block(title, settings.strategy, item.compacted, item.baseline)
    return "\n".join(lines)


def _short_name(name: str) -> str:
    """The file name without its directories, which make the table too wide."""
    return name.replace("\\", "/").rsplit("/", 1)[-1]


def require_matplotlib() -> None:
    """Fail before a long replay, not after it, when ``--plot`` cannot work.

    Raises:
        MissingDependencyError: matplotlib (the ``plot`` extra) is not installed.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError("ctxcompact replay --plot", "plot") from None


def plot_replays(settings: ReplaySettings, replays: Sequence[FileReplay], out: str) -> None:
    """Draw context tokens per call, with and without compaction, one panel per file.

    Raises:
        MissingDependencyError: matplotlib (the ``plot`` extra) is not installed.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt

    cols = min(3, len(replays))
    rows = math.ceil(len(replays) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax, item in zip(axes.flat, replays, strict=False):
        calls = range(1, item.baseline.calls + 1)
        ax.plot(calls, item.baseline.context_tokens, label="no compaction", color="0.55")
        ax.plot(calls, item.compacted.context_tokens, label=settings.strategy, color="C0")
        ax.axhline(
            settings.max_context_size - settings.reserved_context_size,
            color="C3",
            linestyle=":",
            linewidth=1,
            label="trigger",
        )
        title = _short_name(item.name)
        ax.set_title(title if len(title) <= 48 else title[:47] + "…", fontsize=9)
        ax.set_xlabel("model call")
        ax.set_ylabel("context tokens")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(replays) :]:
        ax.set_visible(False)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    finally:
        plt.close(fig)


def dumps(document: dict[str, Any]) -> str:
    """JSON text of a report document: stable key order, two-space indent."""
    return json.dumps(document, indent=2, ensure_ascii=False)
