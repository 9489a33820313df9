"""What the commands print: text tables, the documented ``--json`` documents (the plot is in
:mod:`._plot`).

The JSON documents carry a ``schema`` string (``ctxcompact.<command>/1``); keys are only ever
added under the same version, never renamed or removed.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._tokens.pricing import Pricing
from ..replay import FileReplay, ReplayStats
from ._plot import plot_replays, require_matplotlib

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ReplaySettings",
    "distinct_labels",
    "dumps",
    "plot_replays",
    "replay_json",
    "replay_text",
    "require_matplotlib",
    "stats_json",
]

_STAT_KEYS = (
    "calls",
    "triggers",
    "compactions",
    "failed_compactions",
    "input_tokens",
    "peak_context_tokens",
    "cost",
    "cache_breaks",
    "cache_read_tokens",
    "cache_write_tokens",
    "expired_calls",
    "calls_over_window",
    "removed_results",
    "removed_then_referenced",
    "recallable_results",
    "lost_results",
    "removed_originals",
    "lost_originals",
    "cleared_arguments",
    "lost_arguments",
    "summarizer_calls",
    "summarizer_tokens",
    "summarizer_cached_tokens",
    "summarizer_hot_calls",
    "summarizer_hot_s",
    "summarizer_background_calls",
    "summarizer_background_s",
    "hot_calls_after_first",
    "hot_s_after_first",
    "summarizer_waited_s",
    "ahead_used",
    "ahead_unused",
)
_SECONDS_KEYS = (
    "summarizer_hot_s",
    "summarizer_background_s",
    "hot_s_after_first",
    "summarizer_waited_s",
)
# JSON keys whose value is a ReplayStats attribute of another name.
_ATTRIBUTES = {"removed_then_referenced": "referenced_results"}
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
        pricing: How the cost was billed (``None``: flat at ``cached_price``).
        recall: Whether some run had recall on (the report then says how many of the
            removed-then-referenced results the agent could have recalled).
        params: Per run, the strategy parameters it ran with and the limits given on the
            command line (``--reserved``...): what the advice must not suggest again.
        trigger_at: The token count compaction starts at (``None``: the window minus the
            reserve; a ``trigger_ratio`` may put it lower).

    Example:
        >>> ReplaySettings(("tool-result-hiding",), 16000, 4000, 0.1, "heuristic").strategies
        ('tool-result-hiding',)
    """

    strategies: tuple[str, ...]
    max_context_size: int
    reserved_context_size: int
    cached_price: float
    token_counter: str
    pricing: Pricing | None = None
    recall: bool = False
    params: tuple[Mapping[str, object], ...] = ()
    trigger_at: int | None = None

    @property
    def trigger(self) -> int:
        """The token count compaction starts at."""
        if self.trigger_at is not None:
            return self.trigger_at
        return self.max_context_size - self.reserved_context_size

    @property
    def priced(self) -> bool:
        """Billed at a provider's prices rather than the flat model."""
        return self.pricing is not None and self.pricing.name != "flat"


def distinct_labels(
    specs: Sequence[str], params: Sequence[Mapping[str, object]] = ()
) -> tuple[str, ...]:
    """One column label per run: its strategy spec, with the parameters it was given on the
    command line when the spec repeats, and ``#n`` when even those repeat.

    Example:
        >>> distinct_labels(["hiding", "hiding", "guard"], [{}, {"preserve_recent_n": 3}, {}])
        ('hiding', 'hiding (preserve_recent_n=3)', 'guard')
        >>> distinct_labels(["hiding", "hiding"])
        ('hiding #1', 'hiding #2')
    """
    labels = []
    for k, spec in enumerate(specs):
        given = params[k] if k < len(params) else {}
        repeated = specs.count(spec) > 1
        shown = ", ".join(f"{name}={value}" for name, value in given.items())
        labels.append(f"{spec} ({shown})" if repeated and shown else spec)
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        if labels.count(label) > 1:
            seen[label] = seen.get(label, 0) + 1
            out.append(f"{label} #{seen[label]}")
        else:
            out.append(label)
    return tuple(out)


def ratio(part: float, whole: float) -> float | None:
    """``part / whole``, or ``None`` when there is no whole to compare with."""
    return part / whole if whole else None


def stats_json(stats: ReplayStats, *, per_call: bool) -> dict[str, Any]:
    """One ``Stats`` object of the replay schema."""
    data: dict[str, Any] = {key: getattr(stats, _ATTRIBUTES.get(key, key)) for key in _STAT_KEYS}
    data["cost"] = round(stats.cost, 3)
    for key in _SECONDS_KEYS:
        data[key] = round(data[key], 3)
    data["removed_then_referenced_rate"] = round(_referenced_rate(stats), 4)
    if per_call:
        data["context_tokens"] = list(stats.context_tokens)
    return data


def _referenced_rate(stats: ReplayStats) -> float:
    """``referenced / removed``: 0 when nothing was removed."""
    return stats.referenced_results / stats.removed_results if stats.removed_results else 0.0


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
    """The ``ctxcompact.replay/1`` document (keys: the guide "Replay and reading its report")."""
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
            "pricing": _pricing_json(settings),
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


def _pricing_json(settings: ReplaySettings) -> dict[str, Any]:
    p = settings.pricing or Pricing("flat", read=settings.cached_price)
    return {
        "name": p.name,
        "read": p.read,
        "write": p.write,
        "ttl_seconds": p.ttl_seconds,
        "min_tokens": p.min_tokens,
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
    ("calls over the window", "calls_over_window", False),
    ("removed then referenced", "referenced_results", False),
    ("summarizer calls", "summarizer_calls", False),
    ("summarizer tokens", "summarizer_tokens", False),
)
_LOSS_KEYS = ("input_tokens", "cost")  # above 100% of no compaction: a loss
_LEGEND = "(percentages are of no compaction; LOSS: above 100%, worse than not compacting)"


def is_loss(value: float | None) -> bool:
    """Whether a ratio to no compaction shows as more than 100.0%."""
    return value is not None and round(value, 3) > 1


def _cell(value: float, base: float, key: str, *, long: bool, can_lose: bool = True) -> str:
    """``value (share of base)``, marked LOSS above 100% when the baseline could have run
    (``can_lose``: a baseline with calls over the window is no price to beat)."""
    share = ratio(value, base)
    text = _pct(share) + (" of no compaction" if long and share is not None else "")
    if can_lose and key in _LOSS_KEYS and is_loss(share):
        text += ", LOSS" if long else " LOSS"
    return f"{_num(value)} ({text})"


def _rows(pricing: Pricing | None, *, recall: bool) -> tuple[tuple[str, str, bool], ...]:
    """The rows of a block; a provider's pricing names the cost and adds cache reads and writes."""
    flat = pricing is None or pricing.name == "flat"
    out = []
    for row in _ROWS:
        if row[1] == "referenced_results":
            out.append(row)
            if recall:
                out.append(("  could be recalled", "recallable_results", False))
                out.append(("  lost for good", "lost_results", False))
        elif row[1] == "cost" and pricing is not None and not flat:
            out.append((f"cost ({_short(pricing.name, 15)})", "cost", True))
            out.append(("cache reads (tokens)", "cache_read_tokens", False))
            out.append(("cache writes (tokens)", "cache_write_tokens", False))
            if pricing.ttl_seconds is not None:
                out.append(("calls after TTL", "expired_calls", False))
        else:
            out.append(row)
    return tuple(out)


def _block(
    title: str,
    labels: Sequence[str],
    baseline: ReplayStats,
    compacted: Sequence[ReplayStats],
    priced: Pricing | None = None,
    *,
    recall: bool = False,
) -> list[str]:
    """Rows of statistics, one column for no compaction and one per strategy.

    With one strategy each percentage says what it is of; with several, a legend does.
    """
    long = len(labels) == 1
    rows = []
    for name, key, with_ratio in _rows(priced, recall=recall):
        base = getattr(baseline, key)
        cells = [
            _cell(
                getattr(stats, key), base, key, long=long, can_lose=not baseline.calls_over_window
            )
            if with_ratio
            else _referenced_cell(stats)
            if key == "referenced_results"
            else _num(getattr(stats, key))
            for stats in compacted
        ]
        rows.append((name, "-" if key == "referenced_results" else _num(base), cells))
    if any(stats.summarizer_calls for stats in compacted):
        # Where the summarizer's time went: the agent waited for it, or it ran meanwhile.
        rows.append(("summarizer hot wait", "-", [_hot_wait(s) for s in compacted]))
        rows.append(
            ("  after 1st compaction", "-", [f"{s.hot_s_after_first:.1f} s" for s in compacted])
        )
        rows.append(
            (
                "summarizer background",
                "-",
                [f"{s.summarizer_background_s:.1f} s" for s in compacted],
            )
        )
    # Wide enough for every label: two runs of one strategy differ only at their end.
    width = max(
        26, *(len(label) + 2 for label in labels), *(len(c) + 2 for _, _, r in rows for c in r)
    )
    head = "".join(f"{label:>{width}}" for label in labels)
    lines = [title, f"  {'':<22}{'no compaction':>15}{head}"]
    lines += [f"  {name:<22}{base:>15}{''.join(f'{c:>{width}}' for c in cells)}"
              for name, base, cells in rows]  # fmt: skip
    if not long:
        lines.append(f"  {_LEGEND}")
    return lines


def _referenced_cell(stats: ReplayStats) -> str:
    """``referenced of removed (rate)``: removed results a later answer quoted (``-`` when
    nothing was removed: there is no rate)."""
    if not stats.removed_results:
        return "-"
    return (
        f"{stats.referenced_results:,} of {stats.removed_results:,} "
        f"(rate {_pct(_referenced_rate(stats))})"
    )


def _file_table(labels: Sequence[str], replays: Sequence[FileReplay]) -> list[str]:
    names = [_short_name(item.name) for item in replays]
    width = max(24, *(len(name) for name in names))
    many = len(labels) > 1
    label_width = max(len(label) for label in labels) if many else 0
    strategy_head = f"  {'strategy':<{label_width}}" if many else ""
    lines = [
        f"{'file':<{width}}{strategy_head}  {'calls':>6}  {'compact.':>8}  {'input':>7}  "
        f"{'peak':>7}  {'cost':>7}  {'breaks':>6}  verdict"
    ]
    for name, item in zip(names, replays, strict=True):
        b = item.baseline
        for label, c in zip(labels, item.compacted, strict=True):
            strategy = f"  {label:<{label_width}}" if many else ""
            lines.append(
                f"{name:<{width}}{strategy}  {c.calls:>6}  {c.compactions:>8}  "
                f"{_pct(ratio(c.input_tokens, b.input_tokens)):>7}  "
                f"{_pct(ratio(c.peak_context_tokens, b.peak_context_tokens)):>7}  "
                f"{_pct(ratio(c.cost, b.cost)):>7}  {c.cache_breaks:>6}  {_verdict_word(c, b)}"
            )
    lines.append(_LEGEND)
    return lines


def _verdict_word(stats: ReplayStats, baseline: ReplayStats) -> str:
    """A file's verdict for one strategy: the window first, then the cost."""
    words = []
    if stats.calls_over_window:
        words.append(f"OVER WINDOW ({stats.calls_over_window})")
    elif baseline.calls_over_window:
        words.append("fits")
    if not baseline.calls_over_window:  # a loss only against a baseline that could run
        lost = [k for k in _LOSS_KEYS if is_loss(ratio(getattr(stats, k), getattr(baseline, k)))]
        if lost:
            names = ", ".join("input" if k == "input_tokens" else k for k in lost)
            words.append(f"LOSS ({names})")
    if words:
        return ", ".join(words)
    if stats.compactions == 0 and stats.cost == baseline.cost:
        return "no change"
    return "saves"


# What to try when a strategy costs more than not compacting, by the words in its name: a lead
# and the settings it suggests, each under the key that says it was already given. Measured on
# the seven mini-swe-agent traces (window 16,000, reserved 4,000): Schema 1 went from 104.5% of
# no compaction to 93.7% with clear_at_least=4000 and 99.5% with batch_turns=5, hiding from
# 86.3% to 80.8% and 85.8%; a larger keep window made both worse (window_turns=16: 105.2%,
# preserve_recent_n=10: 100.7%), so it is not suggested.
_ADVICE: tuple[tuple[tuple[str, ...], str, tuple[tuple[str, str], ...]], ...] = (
    (
        ("then-summary", "thensummary"),
        "compact later and less often",
        (
            ("--reserved", "a smaller --reserved"),
            ("max_preserved_messages", "keep more recent messages whole: "
             "--param max_preserved_messages=6"),
        ),
    ),
    (
        ("hiding", "schema1", "masking"),
        "rewrite old results in batches, so the cached prefix survives between them",
        (
            ("clear_at_least", "--param clear_at_least={batch} (only once that many tokens "
             "are freed)"),
            ("batch_turns", "--param batch_turns=5"),
        ),
    ),
    (
        ("summary",),
        "summarize less often",
        (
            ("--reserved", "a smaller --reserved (compacts later)"),
            ("max_preserved_messages", "keep more recent messages: "
             "--param max_preserved_messages=6"),
        ),
    ),
    (
        ("guard",),
        "drop more at once so it happens less often",
        (("reserve_tokens", "a larger --param reserve_tokens"),),
    ),
    (
        ("truncation",),
        "truncate only the biggest results",
        (("max_chars", "a larger --param max_chars"),),
    ),
)  # fmt: skip
# Measured on the 17 public traces: schema1-masking then context-guard in a pipeline leaves 0 of
# 1,044 calls over the window at 16k/4k and at 32k/8k (schema1-masking alone: 12 of 20 on one
# trace at 16k).
_WINDOW_ADVICE = (
    "end it with the guard, which fits every request it runs on: {flags}in a --config file, "
    '[compaction] strategy = "pipeline" and [compaction.params] steps = {steps}'
)


def window_advice(label: str, given: Mapping[str, object] | None = None) -> str:
    """What to try when the strategy named ``label`` leaves calls over the window.

    ``given`` holds the parameters the run had (keys starting with ``--`` are command-line
    flags, not parameters): the suggested step keeps them.

    Example:
        >>> window_advice("schema1-masking").endswith(
        ...     'steps = ["schema1-masking", "context-guard"]')
        True
        >>> window_advice("schema1-masking", {"window_turns": 4, "--reserved": 8000}).endswith(
        ...     'steps = [{strategy = "schema1-masking", params = {window_turns = 4}}, '
        ...     '"context-guard"]')
        True
    """
    spec = label.split(" (", 1)[0].split(" #", 1)[0]
    if spec == "pipeline":
        return _WINDOW_ADVICE.format(flags="", steps='[...its steps, "context-guard"]')
    params = {k: v for k, v in (given or {}).items() if not k.startswith("--")}
    step = _toml_value(spec)
    if params:
        try:
            written = _toml_value(params)
        except TypeError:  # a value TOML cannot write (null): the user fills it in
            written = "{...its params}"
        step = f"{{strategy = {step}, params = {written}}}"
    steps = f'[{step}, "context-guard"]'
    flags = f"--strategy pipeline --param {shlex.quote(f'steps={steps}')}, or "
    return _WINDOW_ADVICE.format(flags=flags, steps=steps)


def _toml_value(value: object) -> str:
    """``value`` as a TOML inline value (what a config file or ``--param`` reads back).

    Example:
        >>> _toml_value({"keep": [1, 2.5, True], "marker x": "[hidden]"})
        '{keep = [1, 2.5, true], "marker x" = "[hidden]"}'
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: the same escapes
    if isinstance(value, Mapping):
        items = (f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else json.dumps(key)


_GENERIC_ADVICE = (
    "rewrite old messages less often: its batching parameters (clear_at_least, batch_turns) "
    "if it has them"
)


def advice(label: str, trigger: int, given: Mapping[str, object] | None = None) -> str:
    """The setting to try when the strategy named ``label`` costs more than no compaction.

    ``trigger`` is the token count compaction starts at; a batch of a third of it is
    suggested for ``clear_at_least``. ``given`` holds the parameters (and flags, such as
    ``--reserved``) the run already set: a setting already given at the suggested value is
    not suggested again, and one given at another value is named with it.
    """
    # The strategy's name alone: a label may add its params or its config file's name.
    key = label.split(" (", 1)[0].split(" #", 1)[0].lower().replace("_", "-")
    batch = f"{max(1_000, round(trigger / 3, -3)):.0f}"
    given = given or {}
    for words, lead, settings in _ADVICE:
        if not any(word in key for word in words):
            continue
        tries = []
        for name, text in settings:
            suggested = text.format(batch=batch)
            if name in given:
                value = given[name]
                if f"{name}={value}" in suggested:
                    continue  # already what it would suggest
                suggested += f" (this run: {name}={value})"
            tries.append(suggested)
        if not tries:
            shown = ", ".join(f"{name}={given[name]}" for name, _ in settings if name in given)
            return (
                f"its suggested settings are already given ({shown}) and it still loses: "
                "try another strategy"
            )
        return f"{lead}: " + ", or ".join(tries)
    return _GENERIC_ADVICE


def _percent_of(stats: ReplayStats, baseline: ReplayStats) -> str:
    cost = ratio(stats.cost, baseline.cost)
    share = ratio(stats.input_tokens, baseline.input_tokens)
    return f"cost {_pct(cost)} of no compaction, input {_pct(share)}"


def _window_words(stats: ReplayStats) -> str:
    if not stats.calls_over_window:
        return f"every one of its {stats.calls:,} calls fits the window"
    return f"{stats.calls_over_window:,} of {stats.calls:,} calls still over the window"


def _verdict(label: str, stats: ReplayStats, baseline: ReplayStats, files: int = 1) -> str:
    """One strategy's line of the verdict; ``files`` replays summed in ``stats``."""
    cost = ratio(stats.cost, baseline.cost)
    share = ratio(stats.input_tokens, baseline.input_tokens)
    if cost is None or share is None:
        return f"{label}: no model call to compare"
    window = _window_words(stats)
    if stats.compactions == 0 and stats.failed_compactions:
        return (
            f"{label}: no change: all {stats.failed_compactions:,} compaction attempts failed "
            f"(the errors are above); {window}"
        )
    if stats.compactions == 0 and stats.cost == baseline.cost:
        if stats.triggers:
            return (
                f"{label}: no change: the trigger fired {stats.triggers:,} times and the "
                f"strategy found nothing to compact; {window}"
            )
        which = (
            "the conversation never reached"
            if files == 1
            else f"none of the {files:,} conversations reached"
        )
        return (
            f"{label}: no change: {which} the trigger "
            f"(peak {baseline.peak_context_tokens:,} tokens); {window}"
        )
    figures = _percent_of(stats, baseline)
    if stats.calls_over_window:
        return f"{label}: does not keep the window: {window}; {figures}"
    if baseline.calls_over_window:  # the comparison is with a run that could not happen
        above = " (above a baseline that could not run)" if is_loss(cost) else ""
        return f"{label}: keeps the window ({window}); {figures}{above}"
    if is_loss(cost) or is_loss(share):
        noun = "cache break" if stats.cache_breaks == 1 else "cache breaks"
        breaks = f"{stats.cache_breaks:,} {noun} against {baseline.cache_breaks:,}"
        return f"{label}: LOSS: {figures}; {breaks}"
    return f"{label}: saves {1 - cost:.1%} of the cost ({figures})"


def _hot_wait(stats: ReplayStats) -> str:
    """Seconds the hot path waited for the summarizer: its calls, and summaries made ahead
    that were not finished at the trigger."""
    return f"{stats.summarizer_hot_s + stats.summarizer_waited_s:.1f} s"


def _summarizer_timing(stats: ReplayStats) -> str | None:
    """Where the summarizer's time went: on the hot path (the agent waited) or ahead of
    time, in the background; ``None`` when it was never called."""
    if not stats.summarizer_calls:
        return None
    hot, background = stats.summarizer_hot_calls, stats.summarizer_background_calls
    parts = [
        f"{background:,} call(s) in the background ({stats.summarizer_background_s:.1f} s)",
        f"the hot path waited {_hot_wait(stats)} ({hot:,} call(s)), "
        f"{stats.hot_s_after_first:.1f} s after the first compaction "
        f"({stats.hot_calls_after_first:,} call(s))",
    ]
    if stats.summarizer_waited_s:
        parts.append(f"{stats.summarizer_waited_s:.1f} s of it for a summary made ahead")
    if stats.ahead_used or stats.ahead_unused:
        parts.append(
            f"summaries made ahead used by {stats.ahead_used:,} compaction(s), "
            f"left unused by {stats.ahead_unused:,}"
        )
    return "summarizer: " + "; ".join(parts)


def _ranked(compacted: Sequence[ReplayStats]) -> list[int]:
    """Run indices, best first: fewest calls over the window, then the lowest cost."""
    return sorted(
        range(len(compacted)), key=lambda n: (compacted[n].calls_over_window, compacted[n].cost)
    )


def _verdicts(
    settings: ReplaySettings,
    baseline: ReplayStats,
    compacted: Sequence[ReplayStats],
    replays: Sequence[FileReplay],
) -> list[str]:
    """The baseline's own fit, then one line per strategy, best first (calls over the window,
    then cost); the files each loses on and what to try when any."""
    lines = ["verdict (calls over the window first, then the cache-adjusted cost):"]
    if baseline.calls_over_window:
        lines.append(
            f"  no compaction could not have run: {baseline.calls_over_window:,} of "
            f"{baseline.calls:,} calls are over the window (input + reserved > "
            f"{settings.max_context_size:,}); its cost is what a run that fails would have cost"
        )
    trigger = settings.trigger
    order = _ranked(compacted) if len(compacted) > 1 else [0]
    for rank, n in enumerate(order, 1):
        label, stats = settings.strategies[n], compacted[n]
        number = f"{rank}. " if len(order) > 1 else ""
        lines.append(f"  {number}{_verdict(label, stats, baseline, len(replays))}")
        timing = _summarizer_timing(stats)
        if timing is not None:
            lines.append(f"    {timing}")
        losing = [
            (item.name, ratio(item.compacted[n].cost, item.baseline.cost))
            for item in replays
            if not item.baseline.calls_over_window
            and any(
                is_loss(ratio(getattr(item.compacted[n], k), getattr(item.baseline, k)))
                for k in _LOSS_KEYS
            )
        ]
        if len(replays) > 1 and losing:
            shown = ", ".join(f"{_short_name(name)} (cost {_pct(r)})" for name, r in losing[:5])
            more = f" and {len(losing) - 5} more" if len(losing) > 5 else ""
            lines.append(f"    loses on {len(losing)} of {len(replays)} files: {shown}{more}")
        given = settings.params[n] if n < len(settings.params) else None
        if stats.calls_over_window:
            lines.append(f"    try: {window_advice(label, given)}")
        elif losing:
            lines.append(f"    try: {advice(label, trigger, given)}")
    return lines


def replay_text(settings: ReplaySettings, replays: Sequence[FileReplay]) -> str:
    """The human-readable replay report."""
    labels = settings.strategies
    lines = [
        f"max context {settings.max_context_size:,} | reserved "
        f"{settings.reserved_context_size:,} (compaction at "
        f"{settings.trigger:,} tokens) | "
        f"{_pricing_text(settings)} | tokens: {settings.token_counter}",
        "",
    ]
    priced = settings.pricing if settings.priced else None
    baseline, compacted = total_of(replays, len(labels))
    if len(replays) > 1:
        lines += _file_table(labels, replays)
        lines.append("")
        title = f"total: {len(replays)} files, {sum(i.messages for i in replays):,} messages"
        lines += _block(title, labels, baseline, compacted, priced, recall=settings.recall)
    else:
        for item in replays:
            title = f"{item.name}: {item.messages} messages"
            lines += _block(
                title, labels, item.baseline, item.compacted, priced, recall=settings.recall
            )
    lines.append("")
    lines += _verdicts(settings, baseline, compacted, replays)
    return "\n".join(lines)


def _pricing_text(settings: ReplaySettings) -> str:
    p = settings.pricing
    if p is None or not settings.priced:
        return f"cached price {settings.cached_price:g}"
    ttl = "no TTL" if p.ttl_seconds is None else f"TTL {p.ttl_seconds:g} s"
    return f"pricing {p.name}: cache reads {p.read:g}, writes {p.write:g}, {ttl}"


def dumps(document: dict[str, Any]) -> str:
    """JSON text of a report document: stable key order, two-space indent."""
    return json.dumps(document, indent=2, ensure_ascii=False)
