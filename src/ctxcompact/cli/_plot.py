"""``ctxcompact replay --plot``: context tokens per call, a panel per file.

Each panel shows no compaction and every strategy, the trigger and the window, and a marker
where a compaction happened (or failed); the figure's title holds the settings. When the
replay statistics carry per-call costs (``call_costs``) and cache breaks
(``cache_break_calls``), each file gains a cost panel below its context panel.

The figure has one legend, below the panels, never over a curve: a line per strategy, and one
entry per kind of marker (the marker takes its strategy's colour). The layout is
matplotlib's constrained layout, so the settings title (wrapped to the figure's width), the
panel titles and the legend never overlap.
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

__all__ = ["draw_replays", "legend_layout", "plot_replays", "require_matplotlib"]

_TITLE_WIDTH = 50  # characters per line of a 9-point panel title: a 5-inch panel holds ~55
_PANEL_WIDTH = 5.0  # inches per column of panels
_CHARS_PER_INCH = 13  # of the 9-point settings title: how wide a line may be before it wraps
_LEGEND_CHAR = 0.075  # inches per character of an 8-point legend label (a wide estimate)
_LEGEND_SAMPLE = 0.75  # inches of an entry besides its text: line sample, padding, spacing


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


def settings_title(settings: ReplaySettings, width: int = 110) -> str:
    """The settings, wrapped at ``width`` characters (the figure's width, so never cut)."""
    strategies = ", ".join(settings.strategies)
    text = (
        f"strategies: {strategies} | window {settings.max_context_size:,} tokens, reserved "
        f"{settings.reserved_context_size:,} (trigger at "
        f"{settings.trigger:,}) | cached price "
        f"{settings.cached_price:g} | tokens: {settings.token_counter}"
    )
    return textwrap.fill(text, width, break_on_hyphens=False)


def legend_layout(labels: Sequence[str], width: float) -> tuple[list[str], int]:
    """The legend's labels, wrapped so that an entry fits ``width`` inches, and how many
    columns fit side by side: never more than the figure holds, so no entry is cut.

    Example:
        >>> legend_layout(["no compaction", "window"], 5.0)
        (['no compaction', 'window'], 2)
        >>> wrapped, columns = legend_layout(["x" * 90], 5.0)
        >>> columns, max(len(line) for line in wrapped[0].splitlines()) <= 56
        (1, True)
    """
    if not labels:
        return [], 1
    fits = max(8, int((width - _LEGEND_SAMPLE) / _LEGEND_CHAR))
    wrapped = [textwrap.fill(label, fits, break_on_hyphens=False) for label in labels]
    widest = max(max(len(line) for line in label.splitlines()) for label in wrapped)
    entry = widest * _LEGEND_CHAR + _LEGEND_SAMPLE
    return wrapped, max(1, min(len(labels), int(width // entry)))


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
    handles = _legend_handles(settings, with_cost=with_cost)
    labels, columns = legend_layout([h.get_label() for h in handles], _PANEL_WIDTH * cols)
    for handle, label in zip(handles, labels, strict=True):
        handle.set_label(label)
    # The legend's height: per row of entries, its tallest (a wrapped label has more lines).
    lines = [label.count("\n") + 1 for label in labels]
    legend_lines = sum(max(lines[r : r + columns]) for r in range(0, len(lines), columns))
    fig, axes = plt.subplots(
        rows * panels,
        cols,
        figsize=(_PANEL_WIDTH * cols, 3.6 * rows * panels + 0.9 + 0.2 * legend_lines),
        squeeze=False,
        layout="constrained",
    )
    trigger = settings.trigger
    for n, item in enumerate(replays):
        ax = axes[(n // cols) * panels][n % cols]
        calls = range(1, item.baseline.calls + 1)
        ax.plot(calls, item.baseline.context_tokens, label="no compaction", color="0.55")
        for k, (label, stats) in enumerate(zip(settings.strategies, item.compacted, strict=True)):
            _strategy_line(ax, label, stats, f"C{k}")
        ax.axhline(settings.max_context_size, color="k", linewidth=1, label="window")
        ax.axhline(trigger, color="k", linestyle=":", linewidth=1, label="trigger")
        name = item.name.replace("\\", "/").rsplit("/", 1)[-1]  # directories make it too long
        ax.set_title(textwrap.fill(name, _TITLE_WIDTH, break_on_hyphens=False), fontsize=9)
        ax.set_xlabel("model call")
        ax.set_ylabel("context tokens")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if with_cost:
            _cost_panel(axes[(n // cols) * panels + 1][n % cols], settings, item)
    for n in range(len(replays), rows * cols):
        for p in range(panels):
            axes[(n // cols) * panels + p][n % cols].set_visible(False)
    width = int(_PANEL_WIDTH * cols * _CHARS_PER_INCH)
    fig.suptitle(settings_title(settings, width), fontsize=9)
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncol=columns,
        fontsize=8,
        frameon=False,
    )
    return fig


def _legend_handles(settings: ReplaySettings, *, with_cost: bool) -> list[Any]:
    """One entry per line (no compaction, each strategy, window, trigger) and per kind of
    marker, drawn in black: on the panels it takes its strategy's colour."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.55", label="no compaction")]
    handles += [
        Line2D([], [], color=f"C{k}", label=label) for k, label in enumerate(settings.strategies)
    ]
    handles += [
        Line2D([], [], color="k", linewidth=1, label="window"),
        Line2D([], [], color="k", linestyle=":", linewidth=1, label="trigger"),
        Line2D([], [], color="k", linestyle="none", marker="v", label="compaction"),
        Line2D([], [], color="red", linestyle="none", marker="x", label="compaction failed"),
    ]
    if with_cost:
        handles.append(
            Line2D(
                [], [], color="k", linestyle="none", marker="o", fillstyle="none",
                label="cache break (cost panels)",
            )
        )  # fmt: skip
    return handles


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
