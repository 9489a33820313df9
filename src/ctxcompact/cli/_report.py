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
from ..replay import FileReplay, ReplayStats
from ._io import CliError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ReplaySettings",
    "dumps",
    "plot_replays",
    "replay_json",
    "replay_text",
    "require_matplotlib",
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
_RATIO_KEYS = ("input_tokens", "peak_context_tokens", "cost")


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """The knobs a replay ran with, echoed in its report.

    Attributes:
        strategies: The strategy of each run, as given (spec or config).
        max_context_size: The window every run triggers against.
        reserved_context_size: Tokens kept free.
        cached_price: Price of a cached token relative to an uncached one.
        token_counter: ``heuristic`` or ``tiktoken``.

    Example:
        >>> ReplaySettings(("tool-result-hiding",), 16000, 4000, 0.1, "heuristic").strategies
        ('tool-result-hiding',)
    """

    strategies: tuple[str, ...]
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
    out: dict[str, float | None] = {}
    for key in _RATIO_KEYS:
        value = ratio(getattr(compacted, key), getattr(baseline, key))
        out[key] = None if value is None else round(value, 4)
    return out


def total_of(replays: Sequence[FileReplay], runs: int) -> tuple[ReplayStats, list[ReplayStats]]:
    """The baseline and each run's statistics, summed over files."""
    baseline = ReplayStats()
    compacted = [ReplayStats() for _ in range(runs)]
    for item in replays:
        baseline += item.baseline
        compacted = [total + stats for total, stats in zip(compacted, item.compacted, strict=True)]
    return baseline, compacted


def _runs_json(
    labels: Sequence[str],
    compacted: Sequence[ReplayStats],
    baseline: ReplayStats,
    *,
    per_call: bool,
) -> list[dict[str, Any]]:
    return [
        {
            "strategy": label,
            "compacted": stats_json(stats, per_call=per_call),
            "ratios": _ratios(stats, baseline),
        }
        for label, stats in zip(labels, compacted, strict=True)
    ]


def replay_json(settings: ReplaySettings, replays: Sequence[FileReplay]) -> dict[str, Any]:
    """The ``ctxcompact.replay/1`` document (see the README for every key)."""
    labels = settings.strategies
    baseline, compacted = total_of(replays, len(labels))
    return {
        "schema": "ctxcompact.replay/1",
        "settings": {
            "strategies": list(labels),
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
                "runs": _runs_json(labels, item.compacted, item.baseline, per_call=True),
            }
            for item in replays
        ],
        "total": {
            "files": len(replays),
            "messages": sum(item.messages for item in replays),
            "baseline": stats_json(baseline, per_call=False),
            "runs": _runs_json(labels, compacted, baseline, per_call=False),
        },
    }


# -- text ----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.0f}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_name(name: str) -> str:
    """The file name without its directories, which make tables too wide."""
    return name.replace("\\", "/").rsplit("/", 1)[-1]


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


def _block(
    title: str, labels: Sequence[str], baseline: ReplayStats, compacted: Sequence[ReplayStats]
) -> list[str]:
    """Rows of statistics, one column for no compaction and one per strategy."""
    width = 26
    head = "".join(f"{_short(label, width - 2):>{width}}" for label in labels)
    lines = [title, f"  {'':<22}{'no compaction':>15}{head}"]
    for name, key, with_ratio in _ROWS:
        base = getattr(baseline, key)
        cells = ""
        for stats in compacted:
            value = getattr(stats, key)
            shown = f"{_num(value)} ({_pct(ratio(value, base))})" if with_ratio else _num(value)
            cells += f"{shown:>{width}}"
        lines.append(f"  {name:<22}{_num(base):>15}{cells}")
    return lines


def _file_table(labels: Sequence[str], replays: Sequence[FileReplay]) -> list[str]:
    names = [_short_name(item.name) for item in replays]
    width = max(24, *(len(name) for name in names))
    many = len(labels) > 1
    label_width = max(len(label) for label in labels) if many else 0
    strategy_head = f"  {'strategy':<{label_width}}" if many else ""
    lines = [
        f"{'file':<{width}}{strategy_head}  {'calls':>6}  {'compact.':>8}  {'input':>7}  "
        f"{'peak':>7}  {'cost':>7}  {'breaks':>6}"
    ]
    for name, item in zip(names, replays, strict=True):
        b = item.baseline
        for label, c in zip(labels, item.compacted, strict=True):
            strategy = f"  {label:<{label_width}}" if many else ""
            lines.append(
                f"{name:<{width}}{strategy}  {c.calls:>6}  {c.compactions:>8}  "
                f"{_pct(ratio(c.input_tokens, b.input_tokens)):>7}  "
                f"{_pct(ratio(c.peak_context_tokens, b.peak_context_tokens)):>7}  "
                f"{_pct(ratio(c.cost, b.cost)):>7}  {c.cache_breaks:>6}"
            )
    lines.append("(input, peak and cost as a percentage of no compaction)")
    return lines


def replay_text(settings: ReplaySettings, replays: Sequence[FileReplay]) -> str:
    """The human-readable replay report."""
    labels = settings.strategies
    lines = [
        f"max context {settings.max_context_size:,} | reserved "
        f"{settings.reserved_context_size:,} (compaction at "
        f"{settings.max_context_size - settings.reserved_context_size:,} tokens) | cached price "
        f"{settings.cached_price:g} | tokens: {settings.token_counter}",
        "",
    ]
    if len(replays) > 1:
        lines += _file_table(labels, replays)
        lines.append("")
        baseline, compacted = total_of(replays, len(labels))
        title = f"total: {len(replays)} files, {sum(i.messages for i in replays):,} messages"
        lines += _block(title, labels, baseline, compacted)
    else:
        for item in replays:
            title = f"{item.name}: {item.messages} messages"
            lines += _block(title, labels, item.baseline, item.compacted)
    return "\n".join(lines)


# -- plot ----------------------------------------------------------------------------------


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
    """Draw context tokens per call for no compaction and each strategy, a panel per file.

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
    trigger = settings.max_context_size - settings.reserved_context_size
    for ax, item in zip(axes.flat, replays, strict=False):
        calls = range(1, item.baseline.calls + 1)
        ax.plot(calls, item.baseline.context_tokens, label="no compaction", color="0.55")
        for n, (label, stats) in enumerate(zip(settings.strategies, item.compacted, strict=True)):
            ax.plot(calls, stats.context_tokens, label=label, color=f"C{n}")
        ax.axhline(trigger, color="k", linestyle=":", linewidth=1, label="trigger")
        ax.set_title(_short(_short_name(item.name), 48), fontsize=9)
        ax.set_xlabel("model call")
        ax.set_ylabel("context tokens")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(replays) :]:
        ax.set_visible(False)
    fig.tight_layout()
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the plot: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def dumps(document: dict[str, Any]) -> str:
    """JSON text of a report document: stable key order, two-space indent."""
    return json.dumps(document, indent=2, ensure_ascii=False)
