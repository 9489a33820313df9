"""``ctxcompact replay --plot``: context tokens per call, a panel per file.

Each panel shows no compaction and every strategy, the trigger and the window, and a marker
where a compaction happened (or failed); the figure's title holds the settings. When the
replay statistics carry per-call costs (``call_costs``) and cache breaks
(``cache_break_calls``), each file gains a cost panel below its context panel.
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

from ..exceptions import CliError, MissingDependencyError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..replay import FileReplay, ReplayStats
    from ._report import ReplaySettings

__all__ = ["draw_replays", "plot_replays", "require_matplotlib"]

_TITLE_WIDTH = 40  # characters per line of a panel title (long file names wrap, never cut)


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
    """Draw the replays (see :func:`draw_replays`) into the PNG file ``out``.

    Raises:
        MissingDependencyError: matplotlib (the ``plot`` extra) is not installed.
        CliError: ``out`` cannot be written.
    """
    import matplotlib.pyplot as plt

    fig = draw_replays(settings, replays)
    try:
        fig.savefig(out, format="png", dpi=100)
    except OSError as exc:
        raise CliError(f"{out}: cannot write the plot: {exc.strerror or exc}", path=out) from None
    finally:
        plt.close(fig)


def settings_title(settings: ReplaySettings) -> str:
    strategies = ", ".join(settings.strategies)
    text = (
        f"strategies: {strategies} | window {settings.max_context_size:,} tokens, reserved "
        f"{settings.reserved_context_size:,} (trigger at "
        f"{settings.max_context_size - settings.reserved_context_size:,}) | cached price "
        f"{settings.cached_price:g} | tokens: {settings.token_counter}"
    )
    return textwrap.fill(text, 110)


def draw_replays(settings: ReplaySettings, replays: Sequence[FileReplay]) -> Any:
    """The figure: per file, context tokens per call (and cost per call when recorded).

    Returns:
        A matplotlib ``Figure`` (the caller saves and closes it).

    Raises:
        MissingDependencyError: matplotlib (the ``plot`` extra) is not installed.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only; never open a window
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    with_cost = any(s.call_costs for r in replays for s in r.compacted)
    cols = min(3, len(replays))
    rows = math.ceil(len(replays) / cols)
    panels = 2 if with_cost else 1
    fig, axes = plt.subplots(
        rows * panels, cols, figsize=(5 * cols, 3.6 * rows * panels), squeeze=False
    )
    trigger = settings.max_context_size - settings.reserved_context_size
    for n, item in enumerate(replays):
        ax = axes[(n // cols) * panels][n % cols]
        calls = range(1, item.baseline.calls + 1)
        ax.plot(calls, item.baseline.context_tokens, label="no compaction", color="0.55")
        for k, (label, stats) in enumerate(zip(settings.strategies, item.compacted, strict=True)):
            _strategy_line(ax, label, stats, f"C{k}")
        ax.axhline(settings.max_context_size, color="k", linewidth=1, label="window")
        ax.axhline(trigger, color="k", linestyle=":", linewidth=1, label="trigger")
        name = item.name.replace("\\", "/").rsplit("/", 1)[-1]  # directories make it too long
        ax.set_title(textwrap.fill(name, _TITLE_WIDTH), fontsize=9)
        ax.set_xlabel("model call")
        ax.set_ylabel("context tokens")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
        if with_cost:
            _cost_panel(axes[(n // cols) * panels + 1][n % cols], settings, item)
    for n in range(len(replays), rows * cols):
        for p in range(panels):
            axes[(n // cols) * panels + p][n % cols].set_visible(False)
    fig.suptitle(settings_title(settings), fontsize=9)
    fig.tight_layout()
    return fig


def _strategy_line(ax: Any, label: str, stats: ReplayStats, color: str) -> None:
    calls = range(1, len(stats.context_tokens) + 1)
    ax.plot(calls, stats.context_tokens, label=label, color=color)
    tokens = stats.context_tokens
    marks = stats.compaction_calls
    if marks:
        ax.plot(
            marks,
            [tokens[c - 1] for c in marks],
            linestyle="none",
            marker="v",
            color=color,
            label=f"{label}: compaction",
        )
    failed = stats.failed_calls
    if failed:
        ax.plot(
            failed,
            [tokens[c - 1] for c in failed],
            linestyle="none",
            marker="x",
            markersize=8,
            color="red",
            label=f"{label}: compaction failed",
        )


def _cost_panel(ax: Any, settings: ReplaySettings, item: FileReplay) -> None:
    from matplotlib.ticker import MaxNLocator

    base = item.baseline.call_costs
    if base:
        ax.plot(range(1, len(base) + 1), base, label="no compaction", color="0.55")
    for k, (label, stats) in enumerate(zip(settings.strategies, item.compacted, strict=True)):
        costs = stats.call_costs
        if not costs:
            continue
        ax.plot(range(1, len(costs) + 1), costs, label=label, color=f"C{k}")
        breaks = stats.cache_break_calls
        if breaks:
            ax.plot(
                breaks,
                [costs[c - 1] for c in breaks],
                linestyle="none",
                marker="o",
                fillstyle="none",
                color=f"C{k}",
                label=f"{label}: cache break",
            )
    ax.set_xlabel("model call")
    ax.set_ylabel(f"cost per call (cached x{settings.cached_price:g})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7)
