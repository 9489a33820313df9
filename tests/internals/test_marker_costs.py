"""What the recall markers cost, white-box: the tiered run's costing of the recall forms
(``recall_extra``), the relevance order's names without marker text, and the earlier wording
of the placeholder still known as one. The behaviour they serve is tested through the public
API in ``tests/test_strategy_tiered.py`` and ``tests/test_strategy_guard.py``."""

from __future__ import annotations

import json

from ctxcompact import CompactionController, HeuristicTokenCounter, Message
from ctxcompact._controller.store_hook import is_builtin_placeholder
from ctxcompact.kit import LEGACY_RECALL_TEMPLATE, cleared_marker, recall_extra, recall_placeholder
from ctxcompact.strategies import Tiered, ToolResultHiding
from ctxcompact.strategies._relevance import Relevance
from ctxcompact.testing import FunctionStrategy, check_strategy_invariants
from tests.helpers.gen import assistant, call, system, tool, user

COUNT = HeuristicTokenCounter()


async def test_the_recall_forms_it_costs_are_the_ones_the_controller_writes() -> None:
    # Masked results and cleared arguments, plain from the tiers: what recall_extra adds to
    # their count is exactly what the store hook's recall forms add (a result shorter than
    # its placeholder comes back whole, and is costed whole).
    h = [system("S"), user("Write the modules.")]
    for k in range(30):
        cid = f"call_{k:04d}"
        body = json.dumps({"path": f"src/m{k}.py", "text": "x = 1\n" * 60})
        h += [assistant(None, call(cid, "Write", body)), tool(cid, "ok" if k % 3 else "w" * 900)]
    assert COUNT.count(h) > 7_000
    strategy = Tiered(tiers=["mask", "clear"], fill=0.15)  # the two tiers reach the target
    plain = await check_strategy_invariants(
        strategy, h, max_context_size=20_000, reserved_context_size=0, token_counter=COUNT
    )
    assert plain is not None
    assert len(plain) == len(h)
    extra = recall_extra(h, plain, COUNT)
    assert extra is not None
    assert any(m.text == "[masked]" for m in plain)
    assert any("[cleared: 360 chars]" in (m.tool_calls or ())[0].arguments for m in plain[2::2])
    hook = CompactionController(
        FunctionStrategy(lambda ctx: list(plain)),  # the same output, given to the hook
        max_context_size=7_000,
        reserved_context_size=0,
        token_counter=COUNT,
    )
    result = await hook.compact(h)
    assert result.event is not None
    view = list(result.history)
    assert any("recall_tool_result(" in m.text for m in view if m.role == "tool")
    assert COUNT.count(view) == COUNT.count(plain) + sum(extra)


async def test_hidden_results_are_costed_in_the_recall_form_the_controller_writes() -> None:
    # Hiding writes its plain placeholder; the store hook writes the recall placeholder in
    # its place (longer), or keeps a result whole that is shorter than that placeholder.
    # HidingThenSummary's "is hiding enough?" and the controller's "does it fit?" cost this.
    h = [system("S"), user("Read the modules.")]
    for k in range(20):
        cid = f"call_{k:04d}"
        h += [assistant(None, call(cid, "Read", "{}")), tool(cid, "r" * (20 if k % 4 else 900))]
    plain = ToolResultHiding(preserve_recent_n=2).hide(h, token_counter=COUNT)
    assert plain is not None
    extra = recall_extra(h, plain, COUNT)
    assert extra is not None
    assert sum(extra) > 0
    hook = CompactionController(
        FunctionStrategy(lambda ctx: list(plain)),
        max_context_size=COUNT.count(h),
        reserved_context_size=0,
        token_counter=COUNT,
    )
    result = await hook.compact(h)
    assert result.event is not None
    assert result.event.status == "compacted"
    view = list(result.history)
    assert any("recall_tool_result(" in m.text for m in view if m.role == "tool")
    assert COUNT.count(view) == COUNT.count(plain) + sum(extra)


def test_marker_text_is_no_name_for_the_relevance_order() -> None:
    handle = "toolu_01ABCDEFGHJKMNPQRSTVWXYZ"
    placeholder = tool(handle, recall_placeholder(handle))
    assert Relevance().names(placeholder) == frozenset()
    cleared = assistant(
        None,
        call(handle, "Write", json.dumps({"text": cleared_marker(2029, handle="args:" + handle)})),
    )
    assert Relevance().names(cleared) == frozenset()
    # The names beside a marker still count.
    arguments = json.dumps({"path": "src/app/config.py", "text": cleared_marker(2029)})
    mixed = assistant(None, call(handle, "Write", arguments))
    assert Relevance().names(mixed) == frozenset({"src/app/config.py"})


def test_a_placeholder_in_the_earlier_wording_is_still_known_as_a_placeholder() -> None:
    # A history written before the shorter default: its placeholders are no originals.
    earlier = LEGACY_RECALL_TEMPLATE.format(tool_call_id="call_7", tool_name="cat")
    assert earlier == '[tool result hidden: call recall_tool_result("call_7") to see it again]'
    assert len(recall_placeholder("call_7")) < len(earlier) - 30
    assert is_builtin_placeholder(Message.tool("call_7", earlier))
    assert is_builtin_placeholder(Message.tool("call_7", recall_placeholder("call_7")))
    assert not is_builtin_placeholder(Message.tool("call_7", "call_7 finished"))
