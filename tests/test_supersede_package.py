"""The third-party package strategies/supersede, used the way an outsider would use it.

The fast tests run it in this environment (where it is installed editable for development);
the slow one builds a fresh virtual environment, installs ctxcompact and the plugin with a
plain ``pip install`` of their paths (no editable shortcut, no system site-packages), and
loads the plugin from a TOML file by both of its names there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ctxcompact_supersede  # installed by .ci/run: pip install -e strategies/supersede
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import HeuristicTokenCounter, Message, check_history, from_openai
from ctxcompact.kit import is_error_result
from ctxcompact.testing import check_strategy_invariants
from tests.helpers.gen import assistant, call, tool, user, valid_histories
from tests.helpers.traces import TRACES_DIR, load_trace, trace_names

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "strategies" / "supersede"
CLAUDE_TRACES = [n for n in trace_names() if n.startswith("claudecode")]


@pytest.mark.parametrize("name", CLAUDE_TRACES)
async def test_on_claude_code_traces_output_is_valid_and_only_reads_change(name: str) -> None:
    history = from_openai(load_trace(name))
    counter = HeuristicTokenCounter()
    strategy = ctxcompact_supersede.SupersededReadMasking()
    out = await check_strategy_invariants(
        strategy, history, max_context_size=200_000, reserved_context_size=20_000
    )
    if out is None:
        return
    changed = [i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a is not b]
    assert changed
    for i in changed:
        assert history[i].role == "tool"
        assert out[i].tool_call_id == history[i].tool_call_id
        assert out[i].text.startswith("[superseded:")
    assert counter.count(out) < counter.count(history)


async def test_claude_code_traces_that_reread_whole_files_are_shrunk() -> None:
    """Two traces re-read whole files. In the others every re-read is partial (an offset into
    a file read whole before) or follows a failed read, and neither may be masked."""
    saved = {}
    for name in CLAUDE_TRACES:
        history = from_openai(load_trace(name))
        out = await check_strategy_invariants(
            ctxcompact_supersede.SupersededReadMasking(), history, reserved_context_size=20_000
        )
        if out is not None:
            counter = HeuristicTokenCounter()
            saved[name] = counter.count(history) - counter.count(out)
    assert set(saved) == {"claudecode__258c7280__precompact", "claudecode__4d5611e5__precompact"}
    assert all(v > 0 for v in saved.values())


@st.composite
def reading_histories(draw: st.DrawFn) -> list[Message]:
    """Valid histories full of re-reads: few paths, partial reads, parallel calls, errors,
    list content, other tools, and maybe a pending final call."""
    history: list[Message] = [user("go")]
    for turn in range(draw(st.integers(1, 10))):
        calls = []
        for k in range(draw(st.integers(1, 3))):
            name = draw(st.sampled_from(["read_file", "read_file", "Read", "bash"]))
            args: dict[str, object] = {"path" if name != "Read" else "file_path": draw(PATHS)}
            if draw(st.integers(0, 3)) == 0:
                args["offset"] = draw(st.sampled_from([0, 10]))
            calls.append(call(f"c{turn}_{k}", name, json.dumps(args)))
        history.append(assistant(None, *calls))
        if turn > 0 and draw(st.integers(0, 9)) == 0:
            break  # a pending final call: no results
        for c in draw(st.permutations(calls)):
            kind = draw(st.sampled_from(["text", "text", "parts", "error", "flagged"]))
            if kind == "text":
                history.append(tool(c.id, draw(st.sampled_from(["x" * 300, "y" * 50, "z"]))))
            elif kind == "parts":
                history.append(tool(c.id, [{"type": "text", "text": "p" * 200}]))
            elif kind == "error":
                history.append(tool(c.id, "Error: no such file"))
            else:
                history.append(tool(c.id, "w" * 300, is_error=True))
    return history


PATHS = st.sampled_from(["a.py", "b.py"])


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(valid_histories(max_turns=3, max_steps=4, max_calls=3), reading_histories()),
    st.sampled_from([0, 2]),
    st.sampled_from([0, 150]),
)
async def test_invariants_on_generated_histories(
    history: list[Message], batch_turns: int, clear_at_least: int
) -> None:
    """Any valid history: the invariants hold, only tool contents change, errors kept, each
    mask saves tokens under the context's counter, and a second run changes nothing."""
    counter = HeuristicTokenCounter(chars_per_token=3.0)  # not the default: it must be used
    strategy = ctxcompact_supersede.SupersededReadMasking(
        batch_turns=batch_turns, clear_at_least=clear_at_least, placeholder="[old]"
    )
    assert check_history(history) == []
    out = await check_strategy_invariants(strategy, history, token_counter=counter)
    if out is None:
        return
    assert len(out) == len(history)
    changed = [i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a is not b]
    assert changed
    for i in changed:
        assert history[i].role == "tool"
        assert not is_error_result(history[i])
        assert not history[i].text.startswith("Error")
        assert out[i].text == "[old]"
        assert out[i].tool_call_id == history[i].tool_call_id
        assert counter.count_message(out[i]) < counter.count_message(history[i])
    assert await check_strategy_invariants(strategy, out, token_counter=counter) is None


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import ctxcompact, ctxcompact_supersede
    from ctxcompact import (HeuristicTokenCounter, check_history, from_openai, load_config,
                            load_strategy)
    from ctxcompact.testing import assert_strategy_invariants

    work, traces = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    report = {"prefix": sys.prefix, "ctxcompact": ctxcompact.__file__,
              "plugin": ctxcompact_supersede.__file__, "specs": {}}
    for spec in ("ctxcompact_supersede:SupersededReadMasking", "supersede"):
        path = work / (spec.replace(":", "_") + ".toml")
        path.write_text(
            "[compaction]\\n"
            f"strategy = {json.dumps(spec)}\\n"
            "max_context_size = 200000\\n"
            "[compaction.params]\\n"
            'tools = { Read = "file_path", read_file = "path" }\\n'
        )
        config = load_config(path)
        counter = HeuristicTokenCounter()
        strategy = load_strategy(config.compaction.strategy, params=config.compaction.params)
        rows = []
        for trace in traces:
            history = from_openai(json.loads(trace.read_text()))
            out = assert_strategy_invariants(strategy, history, token_counter=counter,
                                             max_context_size=200000,
                                             reserved_context_size=20000)
            new = history if out is None else out
            rows.append({"trace": trace.stem, "problems": [str(p) for p in check_history(new)],
                         "before": counter.count(history), "after": counter.count(new),
                         "masked": sum(a is not b for a, b in zip(history, new))})
        report["specs"][spec] = {"class": type(strategy).__name__,
                                 "tools": strategy.tools, "rows": rows}
    print(json.dumps(report))
    """
)


@pytest.mark.slow
def test_pip_installed_into_a_fresh_venv_and_loaded_from_toml_by_both_names(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         str(ROOT), str(PLUGIN)],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    traces = [TRACES_DIR / f"{name}.json" for name in CLAUDE_TRACES]
    run = subprocess.run(
        [str(python), "-c", _SCRIPT, str(tmp_path), *map(str, traces)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)

    # Installed into the fresh venv, not found through this checkout or an editable link.
    assert Path(report["prefix"]).resolve() == venv.resolve()
    for key in ("ctxcompact", "plugin"):
        assert Path(report[key]).resolve().is_relative_to(venv.resolve()), report[key]

    by_class, by_name = (
        report["specs"][s] for s in ("ctxcompact_supersede:SupersededReadMasking", "supersede")
    )
    assert by_class["rows"] == by_name["rows"]
    for spec in (by_class, by_name):
        assert spec["class"] == "SupersededReadMasking"
        assert spec["tools"] == {"Read": "file_path", "read_file": "path"}
    rows = by_name["rows"]
    assert all(row["problems"] == [] for row in rows)
    before = sum(r["before"] for r in rows)
    after = sum(r["after"] for r in rows)
    assert sum(r["masked"] for r in rows) > 0
    assert after < before
    print(
        f"\nsupersede on {len(rows)} Claude Code traces: {before} -> {after} tokens "
        f"({100 * (before - after) / before:.1f}% saved), "
        + ", ".join(f"{r['trace']}: {r['masked']} masked" for r in rows)
    )
