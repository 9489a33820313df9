"""Schema1Masking and mask_old_tool_results: seed 001's test plan, the issue's cases, batching."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from ctxcompact import (
    HeuristicTokenCounter,
    Message,
    TiktokenCounter,
    TokenCounter,
    from_openai,
    to_openai,
)
from ctxcompact.exceptions import ConfigError
from ctxcompact.strategies import (
    SCHEMA1_PLACEHOLDER,
    SCHEMA1_SEED_PLACEHOLDER,
    MaskPolicy,
    Schema1Masking,
    mask_old_tool_results,
)
from tests.helpers.gen import assistant, call, system, tool, user
from tests.helpers.strategy_checks import assert_content_only, assert_safe, dump, run
from tests.helpers.traces import load_trace, trace_names

LONG = "x" * 200
"""Padding that makes a result longer than its rendered placeholder (about 90 characters)."""

PH = "[Observation masked: old tool result (tool_call_id={tool_call_id}, tool={tool_name}, chars={original_chars})]"  # noqa: E501
PH_SEED = "[Observation masquée: résultat d’outil ancien (tool_call_id={tool_call_id}, outil={tool_name}, chars={original_chars})]"  # noqa: E501


def turns(n: int, *, names: tuple[str, ...] = ("ls",), prefix: str = "c") -> list[Message]:
    """``n`` tool turns; turn k calls every tool in ``names`` with ids ``{prefix}{k}_{j}``."""
    out: list[Message] = [user("go")]
    for k in range(n):
        calls = [call(f"{prefix}{k}_{j}", name) for j, name in enumerate(names)]
        out.append(assistant(None, *calls))
        out.extend(tool(c.id, f"output {k} of {c.name} " + LONG) for c in calls)
    out.append(assistant("done"))
    return out


def seed_masking(**params: Any) -> Schema1Masking:
    """Schema 1 as seed 001 specifies it: every request masked, the boundary moving every turn
    (the strategy's defaults mask only a history over the window, in batches of its window)."""
    return Schema1Masking(**{"always": True, "batch_turns": 0, **params})


def masked(before: list[Message], after: list[Message] | None) -> list[int]:
    return [] if after is None else assert_content_only(before, after)


def mask_both(history: list[Message], **params: Any) -> list[int]:
    """Mask with the strategy and with the seed's dict function; both must agree."""
    snap = dump(history)
    strategy_out = run(seed_masking(**params), history)
    assert_safe(history, snap, strategy_out)
    by_class = masked(history, strategy_out)

    raw = to_openai(history)
    raw_copy = copy.deepcopy(raw)
    # The seed's function keeps the seed's French default: give it the strategy's template.
    policy = MaskPolicy(enabled=True, **{"placeholder_template": SCHEMA1_PLACEHOLDER, **params})
    out = mask_old_tool_results(raw, policy)
    assert raw == raw_copy, "the dicts were mutated"
    assert len(out) == len(raw)
    by_dict = [i for i, (a, b) in enumerate(zip(raw, out, strict=True)) if a is not b]
    for i, (a, b) in enumerate(zip(raw, out, strict=True)):
        if a is not b:
            assert {k: v for k, v in a.items() if k != "content"} == {
                k: v for k, v in b.items() if k != "content"
            }
            assert strategy_out is not None
            assert b["content"] == strategy_out[i].content
    assert by_class == by_dict
    return by_class


def tool_indices(history: list[Message]) -> list[int]:
    return [i for i, m in enumerate(history) if m.role == "tool"]


# -- seed 001 §10: invariants --------------------------------------------------------------


def test_invariants_length_order_ids_and_calls_kept() -> None:
    h = turns(12, names=("ls", "cat"))
    raw = to_openai(h)
    out = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=3))
    assert len(out) == len(raw)
    assert [m["role"] for m in out] == [m["role"] for m in raw]
    assert [m.get("tool_call_id") for m in out] == [m.get("tool_call_id") for m in raw]
    assert [m.get("tool_calls") for m in out] == [m.get("tool_calls") for m in raw]
    assert any(a["content"] != b["content"] for a, b in zip(raw, out, strict=True))


# -- seed 001 §10: window --------------------------------------------------------------------


def test_more_turns_than_window_masks_only_older_results() -> None:
    h = turns(10)
    changed = mask_both(h, window_turns=8)
    # Turns 0 and 1 are older than the 8 newest: their results (indices 2 and 4) only.
    assert changed == tool_indices(h)[:2]


def test_parallel_calls_of_one_turn_follow_the_window_together() -> None:
    h = turns(5, names=("ls", "cat", "grep"))
    changed = mask_both(h, window_turns=3)
    assert changed == tool_indices(h)[:6]  # both old turns, all three results each


def test_window_is_counted_in_tool_turns_not_messages() -> None:
    h = turns(4, names=("a", "b", "c", "d", "e"))  # 24 tool messages, 4 turns
    assert mask_both(h, window_turns=4) == []
    assert len(mask_both(h, window_turns=3)) == 5


def test_window_larger_than_the_number_of_turns_masks_nothing() -> None:
    h = turns(3)
    assert run(seed_masking(window_turns=20), h) is None
    assert mask_both(h, window_turns=20) == []


def test_placeholder_fields_are_filled() -> None:
    h = turns(2)
    out = run(seed_masking(window_turns=1), h)
    original = h[2].content
    assert isinstance(original, str)
    assert out[2].content == (
        f"[Observation masked: old tool result (tool_call_id=c0_0, tool=ls, chars={len(original)})]"
    )
    assert out[2].tool_call_id == "c0_0"


def test_default_template_is_english_and_the_seed_function_keeps_the_french_text() -> None:
    assert SCHEMA1_PLACEHOLDER == PH
    assert Schema1Masking().policy.placeholder_template == PH
    assert SCHEMA1_SEED_PLACEHOLDER == PH_SEED
    assert MaskPolicy().placeholder_template == PH_SEED
    h = turns(2)
    raw = to_openai(h)
    out = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=1))
    assert str(out[2]["content"]).startswith("[Observation masquée: résultat d’outil ancien")
    preset = run(seed_masking(window_turns=1, placeholder_template=SCHEMA1_SEED_PLACEHOLDER), h)
    assert preset[2].content == out[2]["content"]


def test_unresolvable_tool_name_is_unknown() -> None:
    raw: list[dict[str, object]] = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function"}]},
        {"role": "tool", "tool_call_id": "a", "content": "old " + LONG},
        *to_openai(turns(1)[1:]),
    ]
    out = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=1))
    assert "outil=unknown" in str(out[1]["content"])


def test_custom_template() -> None:
    h = turns(2)
    out = run(seed_masking(window_turns=1, placeholder_template="[masked {tool_name}]"), h)
    assert out[2].content == "[masked ls]"


# -- seed 001 §10: keepErrors ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        f"Traceback (most recent call last):\n  File 'x.py', line 1\n{LONG}\nValueError: bad",
        json.dumps({"error": "file not found", "path": LONG}),
        json.dumps({"status": "error", "detail": LONG}),
        f"Error: not enough seats on flight HAT229 {LONG}",
        f"<returncode>1</returncode>\n<output>FAIL {LONG}</output>",
        f"Exit code 2\nmake: *** [all] Error 2\n{LONG}",
        f"curl: (7) Failed to connect: Connection refused\n{LONG}",
    ],
)
def test_error_results_are_kept(content: str) -> None:
    h = turns(3)
    h[2] = tool("c0_0", content)
    changed = mask_both(h, window_turns=1)
    assert 2 not in changed
    assert changed == [4]  # turn 1's result is masked as usual
    # keep_errors = false masks it like any other result.
    assert mask_both(h, window_turns=1, keep_errors=False) == [2, 4]


def test_provider_flagged_error_is_kept() -> None:
    h = turns(2)
    h[2] = tool("c0_0", "looks fine", is_error=True)
    assert mask_both(h, window_turns=1) == []


def test_prose_mentioning_exception_or_timeout_is_masked() -> None:
    h = turns(2)
    h[2] = tool(
        "c0_0",
        "The client raises an exception when the timeout is reached; errors are logged. " + LONG,
    )
    assert mask_both(h, window_turns=1) == [2]


def test_json_with_null_error_is_not_an_error() -> None:
    h = turns(2)
    h[2] = tool("c0_0", json.dumps({"error": None, "data": [1, 2, 3], "log": LONG}))
    assert mask_both(h, window_turns=1) == [2]


# -- seed 001 §10: orphans and other fallbacks -----------------------------------------------


def test_orphan_tool_message_is_not_masked() -> None:
    h = turns(3)
    h.insert(1, tool("nobody_called_me", LONG))
    changed = mask_both(h, window_turns=1)
    assert 1 not in changed
    assert changed == [3, 5]


def test_list_content_is_not_masked() -> None:
    h = turns(2)
    h[2] = tool("c0_0", [{"type": "text", "text": "x" * 200}])
    assert mask_both(h, window_turns=1) == []


def test_reused_ids_are_matched_by_position_not_globally() -> None:
    # tau-bench re-uses ids: the old turn's result must be masked even though a recent turn
    # has a call with the same id, and the recent one kept.
    h = [user("go")]
    for k in range(3):
        h += [assistant(None, call("same", "get_user")), tool("same", f"result {k} " + LONG)]
    assert mask_both(h, window_turns=1) == [2, 4]


# -- keep_last_k_per_tool --------------------------------------------------------------------


def test_keep_last_k_per_tool_keeps_results_outside_the_window() -> None:
    h = [user("go")]
    names = ["ls", "cat", "ls", "cat", "grep", "ls", "grep", "grep"]
    for k, name in enumerate(names):
        h += [assistant(None, call(f"c{k}", name)), tool(f"c{k}", f"out {k} " + LONG)]
    results = tool_indices(h)
    # window 2 keeps turns 6 and 7 (grep, grep); K=1 keeps the last ls (5) and cat (3).
    changed = mask_both(h, window_turns=2, keep_last_k_per_tool=1)
    assert changed == [results[k] for k in (0, 1, 2, 4)]
    changed = mask_both(h, window_turns=2, keep_last_k_per_tool=2)
    assert changed == [results[0], results[4]]  # the oldest ls, and a grep (two newer)
    assert mask_both(h, window_turns=2) == [results[k] for k in range(6)]


def test_keep_last_k_none_in_policy_is_off() -> None:
    h = turns(3)
    policy = MaskPolicy(enabled=True, window_turns=1, keep_last_k_per_tool=None)
    out = mask_old_tool_results(to_openai(h), policy)
    assert str(out[2]["content"]).startswith("[Observation")


# -- enabled / disabled --------------------------------------------------------------------


def test_disabled_is_identity() -> None:
    raw = to_openai(turns(12))
    assert mask_old_tool_results(raw, MaskPolicy(enabled=False)) is raw
    assert mask_old_tool_results(raw, MaskPolicy()) is raw  # the seed's default is off
    assert mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=0)) is raw
    assert run(seed_masking(window_turns=0), turns(12)) is None


def test_the_strategy_has_no_switch_of_its_own() -> None:
    """Choosing the strategy (or ``[observation_masking.schema1] enabled``) turns it on."""
    assert run(seed_masking(), turns(12)) is not None
    with pytest.raises(TypeError):
        Schema1Masking(enabled=False)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="leave Schema1Masking out") as caught:
        Schema1Masking.from_policy(MaskPolicy(enabled=False))
    assert caught.value.key == "enabled"


def test_enabled_function_returns_a_new_list_of_the_same_dicts() -> None:
    raw = to_openai(turns(3))
    out = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=8))
    assert out is not raw
    assert all(a is b for a, b in zip(raw, out, strict=True))


def test_from_policy_round_trips() -> None:
    policy = MaskPolicy(enabled=True, window_turns=3, keep_last_k_per_tool=2, batch_turns=4)
    assert Schema1Masking.from_policy(policy).policy == policy.__class__(
        enabled=True, window_turns=3, keep_last_k_per_tool=2, batch_turns=4
    )


# -- idempotence, system messages --------------------------------------------------------------


def test_second_run_on_its_own_output_is_a_no_op() -> None:
    h = [system("be brief"), *turns(12, names=("ls", "cat"))]
    out = run(seed_masking(window_turns=2), h)
    assert out is not None
    assert run(seed_masking(window_turns=2), out) is None
    raw = mask_old_tool_results(to_openai(h), MaskPolicy(enabled=True, window_turns=2))
    again = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=2))
    assert again == raw


# -- batching ---------------------------------------------------------------------------------


def test_batch_turns_moves_the_boundary_by_multiples() -> None:
    for n in range(1, 15):
        h = turns(n)
        changed = mask_both(h, window_turns=2, batch_turns=4)
        maskable = max(0, n - 2)
        assert len(changed) == maskable - maskable % 4


def test_batched_masking_is_stable_as_the_history_grows() -> None:
    # The prompt prefix changes only when the boundary jumps: between jumps, the masked
    # history of a longer conversation starts with the masked history of the shorter one.
    prev: list[Message] | None = None
    jumps = 0
    for n in range(3, 30):
        h = turns(n)
        out = run(seed_masking(window_turns=2, batch_turns=5), h) or h
        prefix = [m.content for m in out[: len(prev) - 1]] if prev else []
        if prev is not None and prefix != [m.content for m in prev[:-1]]:
            jumps += 1
        prev = out
    assert 4 <= jumps <= 6  # about 27 / 5, never once per turn


def test_by_default_only_a_history_over_the_window_is_masked() -> None:
    # Masking what fits is optional, and a per-request transform cannot tell whether the
    # cache it breaks would be paid back: the default leaves such a request alone.
    h = turns(12)
    tokens = HeuristicTokenCounter().count(h)
    assert (
        run(Schema1Masking(window_turns=2), h, max_context_size=tokens + 101, reserved=100) is None
    )
    assert run(Schema1Masking(window_turns=2), h, max_context_size=tokens + 100, reserved=100)
    both = run(Schema1Masking(window_turns=2, always=True), h, max_context_size=tokens + 101)
    assert both is not None


def test_by_default_the_boundary_moves_by_a_whole_window() -> None:
    strategy = Schema1Masking(window_turns=3, always=True)
    assert strategy.policy.batch_turns == 3
    assert repr(strategy) == "Schema1Masking(window_turns=3, always=True)"
    for n in range(1, 15):
        h = turns(n)
        maskable = max(0, n - 3)
        assert len(masked(h, run(strategy, h))) == maskable - maskable % 3


def test_clear_at_least_waits_for_enough_tokens_freed() -> None:
    # Freed is a result's tokens minus its rendered placeholder's (ids c0..c9 render alike):
    # counting the whole result, as before, moved the boundary about twice as often here.
    counter = HeuristicTokenCounter()
    result = tool("c1", "x" * 173)
    text = PH.format(tool_call_id="c1", tool_name="ls", original_chars=173)
    freed = counter.count_message(result) - counter.count_message(result.replace(content=text))
    assert 0 < 4 * freed < 3 * counter.count_message(result)
    threshold = 4 * freed  # exactly four results' worth
    for n in range(2, 11):
        h = [user("go")]
        for k in range(n):
            h += [assistant(None, call(f"c{k}")), tool(f"c{k}", "x" * 173)]
        maskable = n - 1
        changed = mask_both(h, window_turns=1, clear_at_least=threshold)
        assert len(changed) == maskable - maskable % 4


# -- construction errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"window_turns": -1}, "window_turns"),
        ({"keep_last_k_per_tool": -2}, "keep_last_k_per_tool"),
        ({"batch_turns": -1}, "batch_turns"),
        ({"clear_at_least": "many"}, "clear_at_least"),
        ({"placeholder_template": "{tool_call_id} {nope}"}, "placeholder_template"),
        ({"placeholder_template": "{unclosed"}, "placeholder_template"),
    ],
)
def test_bad_parameters_raise_config_error_naming_the_key(params: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Schema1Masking(**params)
    assert info.value.key == key


def test_template_without_fixed_text_is_rejected() -> None:
    with pytest.raises(ConfigError, match="fixed text"):
        Schema1Masking(placeholder_template="{tool_name}")


def test_function_validates_the_policy_template() -> None:
    raw = to_openai(turns(3))
    with pytest.raises(ConfigError) as info:
        mask_old_tool_results(raw, MaskPolicy(enabled=True, placeholder_template="x {oops}"))
    assert info.value.key == "placeholder_template"


def test_template_with_format_specs_is_recognised_on_a_second_run() -> None:
    template = "[masked {tool_name} #{tool_call_id!r}: {original_chars:,} chars]"
    h = turns(4)
    h[2] = tool("c0_0", "x" * 5_000)
    strategy = seed_masking(window_turns=1, placeholder_template=template)
    out = run(strategy, h)
    assert out[2].content == "[masked ls #'c0_0': 5,000 chars]"
    assert run(strategy, out) is None


def test_template_that_cannot_be_formatted_is_rejected() -> None:
    with pytest.raises(ConfigError, match="cannot be formatted"):
        Schema1Masking(placeholder_template="[{original_chars:{tool_name}}]")


# -- never longer (the one deviation from seed 001) ------------------------------------------


def test_result_costing_no_more_than_its_placeholder_is_kept() -> None:
    # Around the boundary, for the default template, the seed's and a custom short one, in ASCII
    # and in Chinese: a result is masked exactly when it costs more tokens than the
    # placeholder that would replace it (the heuristic: about 3.25 ASCII characters a token,
    # 1.3 tokens a Chinese character), not when it is longer in characters.
    counter = HeuristicTokenCounter()
    decided = {True: 0, False: 0}
    for template in (PH, PH_SEED, "[masked {tool_name} {original_chars}]"):
        for size in range(5, 400, 3):
            for text in ("y" * size, "表" * (size // 3)):
                h = turns(2)
                h[2] = tool("c0_0", text)
                rendered = template.format(
                    tool_call_id="c0_0", tool_name="ls", original_chars=len(text)
                )
                shrinks = counter.count_text(text) > counter.count_text(rendered)
                decided[shrinks] += 1
                changed = mask_both(h, window_turns=1, placeholder_template=template)
                assert (2 in changed) == shrinks, (template, text)
                assert 4 not in changed  # the window's result
    assert decided[True] > 50
    assert decided[False] > 50
    # Longer in characters than the placeholder (76) yet no more tokens (24 = 24): kept.
    h = turns(2)
    h[2] = tool("c0_0", "y" * 78)
    assert mask_both(h, window_turns=1) == []


@pytest.mark.parametrize("counter", [HeuristicTokenCounter(), TiktokenCounter()])
def test_masking_never_makes_a_trace_result_bigger_under_the_counter(
    counter: TokenCounter,
) -> None:
    strategy = seed_masking(window_turns=1)
    masked_count = 0
    for name in trace_names():
        history = from_openai(load_trace(name))
        out = strategy.mask(history, token_counter=counter)
        for before, after in zip(history, out or history, strict=True):
            if before is not after:
                masked_count += 1
                assert counter.count_message(after) < counter.count_message(before), name
    assert masked_count > 100


def test_the_dict_function_never_makes_a_trace_result_bigger() -> None:
    count = HeuristicTokenCounter().count_text
    for name in trace_names():
        raw = load_trace(name)
        out = mask_old_tool_results(raw, MaskPolicy(enabled=True, window_turns=1))
        for before, after in zip(raw, out, strict=True):
            if before is not after:
                assert count(str(after["content"])) < count(before["content"]), name
