"""ctxcompact.kit: the public helpers for strategy authors. (That outsiders, the plugin in
``strategies/`` among them, import no private module: ``tests/test_public_api.py``.)"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxcompact
import ctxcompact.kit as kit
from ctxcompact import (
    CompactionContext,
    HeuristicTokenCounter,
    Message,
    ToolSpec,
    from_openai,
    strategies,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.kit import (
    SCHEMA1_FIELDS,
    SCHEMA1_PLACEHOLDER,
    batched_boundary,
    check_int,
    error_reason,
    is_error_result,
    looks_like_error,
    old_groups_end,
    options_repr,
    placeholder_pattern,
    render_placeholder,
    tool_groups,
    validate_template,
    with_content,
)
from ctxcompact.testing import assert_strategy_invariants
from tests.helpers.gen import assistant, call, tool, user, valid_histories
from tests.helpers.traces import load_trace, trace_names

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_is_documented_with_an_example() -> None:
    for name in kit.__all__:  # defined in the kit's private modules, or re-exported
        value = getattr(kit, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__doc__, name
            assert "Example:" in value.__doc__, f"{name} has no Example"
    assert kit.__doc__ is not None
    for name in kit.__all__:  # the menu at the top lists every helper
        assert f"`{name}`" in kit.__doc__, f"{name} is missing from the module's menu"


def test_groups_are_the_library_ones() -> None:
    assert kit.tool_groups is ctxcompact.tool_groups
    assert kit.ToolGroup is ctxcompact.ToolGroup


@settings(max_examples=200, deadline=None)
@given(valid_histories(max_turns=4, max_steps=4, max_calls=3), st.integers(0, 8))
def test_old_groups_end_is_where_the_keep_newest_groups_start(
    history: list[Message], keep: int
) -> None:
    groups = tool_groups(history)
    if keep == 0:
        expected = len(history)
    elif keep > len(groups):
        expected = 0
    else:
        expected = groups[-keep].call_index
    assert old_groups_end(history, keep) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 500), max_size=30),
    st.integers(0, 5),
    st.sampled_from([0, 1, 300, 1000]),
)
def test_batched_boundary_moves_in_whole_batches_of_freed_tokens(
    tokens: list[int], batch_turns: int, clear_at_least: int
) -> None:
    boundary = batched_boundary(
        len(tokens),
        batch_turns=batch_turns,
        clear_at_least=clear_at_least,
        unit_tokens=tokens.__getitem__,
    )
    rounded = len(tokens) - len(tokens) % batch_turns if batch_turns else len(tokens)
    assert 0 <= boundary <= rounded
    if not clear_at_least:
        assert boundary == rounded
        return
    # The boundary sits where the running total last crossed a multiple of T: moving it
    # further (up to the batch limit) would free less than another T.
    assert sum(tokens[:boundary]) // clear_at_least == sum(tokens[:rounded]) // clear_at_least
    if boundary:
        crossed = sum(tokens[:boundary]) // clear_at_least
        assert crossed > sum(tokens[: boundary - 1]) // clear_at_least


def test_batched_boundary_is_stable_while_a_history_grows_within_a_batch() -> None:
    """What batching is for: the masked prefix (and so the prompt cache) changes rarely."""
    seen = [batched_boundary(n, batch_turns=4) for n in range(13)]
    assert seen == [0] * 4 + [4] * 4 + [8] * 4 + [12]


def test_batched_boundary_edges_outsiders_meet() -> None:
    """Fewer groups than kept gives a negative boundary: nothing to rewrite, not a slice
    from the end; tokens are needed only to batch by tokens."""
    assert batched_boundary(-2, batch_turns=3) == 0
    assert batched_boundary(-2, clear_at_least=10, unit_tokens=lambda k: 99) == 0
    with pytest.raises(TypeError, match="unit_tokens"):
        batched_boundary(5, clear_at_least=100)


def test_error_heuristic_on_results_content_and_text() -> None:
    assert is_error_result(tool("a", "Traceback (most recent call last):\n  File x"))
    assert is_error_result(tool("a", "all good", is_error=True))  # the provider's flag
    assert not is_error_result(tool("a", "The function raises an error if the file is missing."))
    assert looks_like_error([{"type": "text", "text": "npm ERR! missing script: test"}])
    assert not looks_like_error(None)
    assert error_reason("src/a.c:3:5: error: expected ';'") == "compiler_error"
    assert error_reason("except TimeoutError:\n    pass") is None


def test_error_heuristic_finds_errors_in_real_traces_and_not_everywhere() -> None:
    results = [
        m for name in trace_names() for m in from_openai(load_trace(name)) if m.role == "tool"
    ]
    flagged = sum(map(is_error_result, results))
    assert 0 < flagged < len(results) // 4


def test_placeholders_render_validate_and_are_recognised() -> None:
    text = render_placeholder(SCHEMA1_PLACEHOLDER, tool_call_id="c9", tool_name="ls", chars=4321)
    assert "tool_call_id=c9" in text
    assert "chars=4321" in text
    assert placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch(text)
    assert not placeholder_pattern(SCHEMA1_PLACEHOLDER).fullmatch("a.py b.py")
    validate_template(SCHEMA1_PLACEHOLDER, SCHEMA1_FIELDS, key="placeholder_template")
    with pytest.raises(ConfigError) as info:
        validate_template("[masked {tool_name} {size}]", SCHEMA1_FIELDS, key="placeholder")
    assert info.value.key == "placeholder"
    assert "['size']" in str(info.value)
    with pytest.raises(ConfigError, match="fixed text"):
        validate_template("{tool_name}", SCHEMA1_FIELDS, key="placeholder")


def test_with_content_copies_and_keeps_everything_else() -> None:
    original = tool("c1", "long output", is_error=True, cache_control={"type": "ephemeral"})
    before = original.model_dump()
    copy = with_content(original, "[hidden]")
    assert copy is not original
    assert copy.text == "[hidden]"
    assert copy == original.replace(content="[hidden]")
    assert copy.model_extra == original.model_extra
    assert original.model_dump() == before
    asked = assistant(None, call("c1"))
    assert with_content(asked, "thinking").tool_calls == asked.tool_calls


def test_check_int_names_the_parameter() -> None:
    assert check_int("batch_turns", 0) == 0
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(ConfigError) as info:
            check_int("batch_turns", bad)  # type: ignore[arg-type]
        assert info.value.key == "batch_turns"
    with pytest.raises(ConfigError, match=">= 1"):
        check_int("max_chars", 0, minimum=1)


# -- a strategy written from the kit alone (the README's example) --------------------------------

PLACEHOLDER = "[old tool result hidden]"


class HideOldResults:
    """Hide the results of all but the ``keep`` newest tool-call groups; errors stay."""

    def __init__(self, *, keep: int = 3, batch_turns: int = 4) -> None:
        self.keep = check_int("keep", keep)
        self.batch_turns = check_int("batch_turns", batch_turns)

    async def compact(self, ctx: CompactionContext) -> list[Message] | None:
        history, count = ctx.history, ctx.token_counter.count_message
        groups = tool_groups(history)
        old = batched_boundary(len(groups) - self.keep, batch_turns=self.batch_turns)
        out = list(history)
        for group in groups[:old]:
            for i in group.result_indices:
                hidden = with_content(history[i], PLACEHOLDER)
                if not is_error_result(history[i]) and count(hidden) < count(history[i]):
                    out[i] = hidden
        return out if any(a is not b for a, b in zip(out, history, strict=True)) else None


def test_the_readme_example_strategy_keeps_the_invariants_on_every_trace() -> None:
    counter = HeuristicTokenCounter()
    saved = kept_errors = 0
    for name in trace_names():
        history = from_openai(load_trace(name))
        out = assert_strategy_invariants(HideOldResults(keep=2), history)
        if out is None:
            continue
        saved += counter.count(history) - counter.count(out)
        kept_errors += sum(
            1 for a, b in zip(history, out, strict=True) if a is b and is_error_result(a)
        )
    assert saved > 0
    assert kept_errors > 0


def test_the_readme_example_strategy_batches_and_rejects_bad_params() -> None:
    def history(turns: int) -> list[Message]:
        out = [user("go")]
        for i in range(turns):
            out += [assistant(None, call(f"c{i}")), tool(f"c{i}", "x" * 400)]
        return out

    hidden = []
    for turns in range(2, 12):
        out = assert_strategy_invariants(HideOldResults(keep=2, batch_turns=4), history(turns))
        hidden.append(0 if out is None else sum(m.text == PLACEHOLDER for m in out))
    assert hidden == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]
    with pytest.raises(ConfigError, match="keep"):
        HideOldResults(keep=-1)


# -- reprs derived from the options ---------------------------------------------------------------

SPECIAL_VALUES: dict[str, object] = {
    "fallback": "noop-only",
    "max_input_tokens": 9_000,
    "tools": ["Read"],  # ToolInputClearing's: tool names
    "LLMSummary.tools": [ToolSpec("ls")],  # the summarizer's: specs it sends
    "HidingThenSummary.tools": [ToolSpec("ls")],
    "context_window": 32_000,
    "reserve_tokens": 1_000,
    "fill": 0.5,
    "Schema1Masking.batch_turns": 3,  # unset: by window_turns
    "drop_batch": 4,  # unset: 8 per request, 1 triggered
    "drop": "relevance",  # unset: oldest per request (the guard here has a window)
    "Tiered.tiers": ["mask", "clear"],
    "max_result_share": 0.125,
    "summary": {"max_summary_tokens": 512},
    "guard": {"drop": "oldest"},
}
"""A valid value other than the default, for the options a generic change cannot make."""


def _changed(cls: type, name: str, default: object) -> object:
    for key in (f"{cls.__name__}.{name}", name):
        if key in SPECIAL_VALUES:
            return SPECIAL_VALUES[key]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    assert isinstance(default, str), name
    return default + " (changed)"


BUILT_INS = [
    strategies.ToolResultHiding,
    strategies.Schema1Masking,
    strategies.LLMSummary,
    strategies.HidingThenSummary,
    strategies.ToolResultTruncation,
    strategies.ContextGuard,
    strategies.ToolInputClearing,
    strategies.Tiered,
]
"""Pipeline's only options are its steps, shown positionally: its own test below."""


@pytest.mark.parametrize("cls", BUILT_INS, ids=lambda c: c.__name__)
def test_each_option_set_shows_in_the_repr_and_the_repr_rebuilds_it(cls: type) -> None:
    base: dict[str, object] = {"context_window": 32_000} if cls is strategies.ContextGuard else {}
    namespace = {**vars(strategies), "ToolSpec": ToolSpec}
    # `dependencies` is what the loader offers (Tiered's tiers named as strategies), no option.
    options = [
        p
        for p in inspect.signature(cls).parameters.values()
        if p.kind is p.KEYWORD_ONLY and p.name != "dependencies"
    ]
    assert options
    for option in options:
        strategy = cls(**{**base, option.name: _changed(cls, option.name, option.default)})
        text = repr(strategy)
        assert f"{option.name}=" in text, text
        assert repr(eval(text, namespace)) == text  # reads like the call that built it
    defaults = ", ".join(f"{k}={v!r}" for k, v in base.items())
    assert repr(cls(**base)) == f"{cls.__name__}({defaults})"  # defaults are not shown


def test_a_pipeline_shows_its_steps_whether_passed_or_loaded() -> None:
    passed = strategies.Pipeline(
        strategies.ToolResultTruncation(), strategies.ToolResultHiding(preserve_recent_n=3)
    )
    assert repr(passed) == "Pipeline(ToolResultTruncation(), ToolResultHiding(preserve_recent_n=3))"
    loaded = strategies.Pipeline(steps=["tool-result-truncation"])
    assert repr(loaded) == "Pipeline(ToolResultTruncation())"


def test_options_repr_reads_options_from_the_parts_that_keep_them() -> None:
    class Part:
        def __init__(self) -> None:
            self.limit = 7

    class Strategy:
        def __init__(self, llm: object = None, *, keep: int = 3, limit: int = 5) -> None:
            self.llm, self.keep, self.part = llm, keep, Part()

        def __repr__(self) -> str:
            return options_repr(self, self.part)

    assert repr(Strategy(object(), keep=3)) == "Strategy(limit=7)"  # llm: not an option
    assert repr(Strategy(keep=4)) == "Strategy(keep=4, limit=7)"
