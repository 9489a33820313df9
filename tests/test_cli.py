"""Every command through its real entry point (a subprocess), on public traces and bad files.

Also pins the documented ``--json`` schemas (exact keys and types) and checks that ``--plot``
writes a PNG matplotlib can read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import check_history, from_openai
from tests.helpers.traces import TRACES_DIR

SMALL = TRACES_DIR / "taubench-gpt4o-airline__task3_trial0.json"
MSA = TRACES_DIR / "msa-gemini3pro__astropy__astropy-8872.json"
SCRIPT = Path(sys.executable).with_name("ctxcompact")


def run(*args: str | Path, script: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "ctxcompact"]
    return subprocess.run(
        [*command, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


STATS: dict[str, type | tuple[type, ...]] = {
    "calls": int,
    "triggers": int,
    "compactions": int,
    "failed_compactions": int,
    "input_tokens": int,
    "peak_context_tokens": int,
    "cost": (int, float),
    "cache_breaks": int,
    "cache_read_tokens": int,
    "cache_write_tokens": int,
    "expired_calls": int,
    "calls_over_window": int,
    "removed_results": int,
    "removed_then_referenced": int,
    "removed_then_referenced_rate": (int, float),
    "recallable_results": int,
    "lost_results": int,
    "removed_originals": int,
    "lost_originals": int,
    "cleared_arguments": int,
    "lost_arguments": int,
    "summarizer_calls": int,
    "summarizer_tokens": int,
    "summarizer_cached_tokens": int,
    "summarizer_hot_calls": int,
    "summarizer_hot_s": (int, float),
    "summarizer_background_calls": int,
    "summarizer_background_s": (int, float),
    "hot_calls_after_first": int,
    "hot_s_after_first": (int, float),
    "summarizer_waited_s": (int, float),
    "ahead_used": int,
    "ahead_unused": int,
}
RATIOS = {"input_tokens", "peak_context_tokens", "cost"}


def assert_shape(value: dict[str, Any], shape: dict[str, Any]) -> None:
    assert set(value) == set(shape)
    for key, kind in shape.items():
        assert isinstance(value[key], kind), (key, value[key])


def test_replay_with_no_file_replays_the_demo_through_the_console_script() -> None:
    result = run("replay", script=SCRIPT.exists())
    assert result.returncode == 0, result.stderr
    assert "demo (built-in): 50 messages" in result.stdout
    assert "tool-result-hiding" in result.stdout
    compactions = next(line for line in result.stdout.splitlines() if "compactions" in line)
    assert compactions.split()[-1] != "0"  # the defaults make the demo compact


def test_replay_json_schema_and_totals(tmp_path: Path) -> None:
    plot = tmp_path / "context.png"
    result = run(
        "replay", SMALL, MSA, "--strategy", "schema1-masking", "--strategy", "tool-result-hiding",
        "--param", "batch_turns=2", "--json", "--plot", plot, "--no-progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"schema", "settings", "files", "total"}
    assert doc["schema"] == "ctxcompact.replay/1"
    assert doc["settings"] == {
        "strategies": ["schema1-masking", "tool-result-hiding"],
        "max_context_size": 16000,
        "reserved_context_size": 4000,
        "cached_price": 0.1,
        "token_counter": "heuristic",
        "pricing": {
            "name": "flat",
            "read": 0.1,
            "write": 1.0,
            "ttl_seconds": None,
            "min_tokens": 0,
        },
    }
    assert [f["file"] for f in doc["files"]] == [str(SMALL), str(MSA)]
    for entry in doc["files"]:
        assert set(entry) == {"file", "messages", "baseline", "runs"}
        base = entry["baseline"]
        assert (base["compactions"], base["cache_breaks"]) == (0, 0)  # nothing ever changes
        assert [run["strategy"] for run in entry["runs"]] == doc["settings"]["strategies"]
        for stats in [base] + [run["compacted"] for run in entry["runs"]]:
            assert_shape(stats, {**STATS, "context_tokens": list})
            assert len(stats["context_tokens"]) == stats["calls"] == base["calls"]
            assert sum(stats["context_tokens"]) == stats["input_tokens"]
            assert max(stats["context_tokens"]) == stats["peak_context_tokens"]
        for run_ in entry["runs"]:
            assert set(run_) == {"strategy", "compacted", "ratios"}
            assert set(run_["ratios"]) == RATIOS
            assert run_["ratios"]["input_tokens"] == round(
                run_["compacted"]["input_tokens"] / base["input_tokens"], 4
            )
    msa = doc["files"][1]
    for run_ in msa["runs"]:
        assert run_["compacted"]["compactions"] >= 1
        assert run_["compacted"]["input_tokens"] < msa["baseline"]["input_tokens"]
    total = doc["total"]
    assert set(total) == {"files", "messages", "baseline", "runs"}
    assert total["files"] == 2
    assert total["messages"] == sum(f["messages"] for f in doc["files"])
    for n, run_ in enumerate(total["runs"]):
        assert_shape(run_["compacted"], STATS)
        for key in ("calls", "input_tokens", "compactions", "cache_breaks"):
            expected = sum(f["runs"][n]["compacted"][key] for f in doc["files"])
            assert run_["compacted"][key] == expected

    data = plot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(plot)
    assert image.ndim == 3
    assert image.shape[0] > 100
    assert image.shape[1] > 100


def _tiered_config(path: Path, fill: float, window: int = 16_000) -> Path:
    path.write_text(
        f'[compaction]\nstrategy = "tiered"\nmax_context_size = {window}\n'
        f"reserved_context_size = 4000\n[compaction.params]\nfill = {fill}\n",
        encoding="utf-8",
    )
    return path


def test_replay_compares_several_configs_one_column_each(tmp_path: Path) -> None:
    # Two files naming one strategy: two runs, told apart by their file, each with the figures
    # it gives alone (the second file used to replace the first without a word).
    low = _tiered_config(tmp_path / "low.toml", 0.3)
    high = _tiered_config(tmp_path / "high.toml", 0.6)
    both = run("replay", "--json", "--config", low, "--config", high, MSA)
    assert both.returncode == 0, both.stderr
    doc = json.loads(both.stdout)
    assert doc["settings"]["strategies"] == ["tiered (low.toml)", "tiered (high.toml)"]
    costs = [r["compacted"]["cost"] for r in doc["files"][0]["runs"]]
    alone = []
    for path in (low, high):
        single = run("replay", "--json", "--config", path, MSA)
        assert single.returncode == 0, single.stderr
        alone.append(json.loads(single.stdout)["files"][0]["runs"][0]["compacted"]["cost"])
    assert costs == alone
    assert costs[0] != costs[1]


def test_replay_tells_same_named_configs_apart_by_path(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _tiered_config(tmp_path / "a" / "c.toml", 0.3)
    second = _tiered_config(tmp_path / "b" / "c.toml", 0.6)
    done = run("replay", "--json", "--config", first, "--config", second, SMALL)
    assert done.returncode == 0, done.stderr
    labels = json.loads(done.stdout)["settings"]["strategies"]
    assert labels == [f"tiered ({first})", f"tiered ({second})"]


def test_replay_checks_only_the_pricing_table_it_bills_with(tmp_path: Path) -> None:
    priced = []
    for name, read in (("p1.toml", 0.1), ("p2.toml", 0.2)):
        path = _tiered_config(tmp_path / name, 0.4)
        with path.open("a", encoding="utf-8") as file:
            file.write(f"[pricing.mine]\nread = {read}\nwrite = 1.0\n")
        priced.append(path)
    unused = run("replay", "--config", priced[0], "--config", priced[1], SMALL)
    assert unused.returncode == 0, unused.stderr  # flat pricing: [pricing.mine] is not used
    used = run("replay", "--config", priced[0], "--config", priced[1], "--pricing", "mine", SMALL)
    assert used.returncode == 2
    assert "--pricing mine: the --config files define [pricing.mine] differently" in used.stderr


def test_replay_refuses_configs_it_could_not_compare(tmp_path: Path) -> None:
    low = _tiered_config(tmp_path / "low.toml", 0.4)
    wide = _tiered_config(tmp_path / "wide.toml", 0.4, window=32_000)
    different = run("replay", "--config", low, "--config", wide, MSA)
    assert different.returncode == 2
    assert "low.toml: window 16,000" in different.stderr
    assert "wide.toml: window 32,000" in different.stderr
    # At one window given on the command line they compare.
    same = run("replay", "--config", low, "--config", wide, "--max-context-size", "20000", MSA)
    assert same.returncode == 0, same.stderr
    # A trigger_ratio moves the trigger the report states once for every run.
    early = _tiered_config(tmp_path / "early.toml", 0.4)
    text = early.read_text(encoding="utf-8")
    early.write_text(text.replace("[compaction]\n", "[compaction]\ntrigger_ratio = 0.5\n"))
    triggers = run("replay", "--config", low, "--config", early, MSA)
    assert triggers.returncode == 2
    assert "trigger at 12,000" in triggers.stderr
    assert "trigger at 8,000" in triggers.stderr
    alone = run("replay", "--config", early, MSA)
    assert alone.returncode == 0, alone.stderr
    assert "(compaction at 8,000 tokens)" in alone.stdout
    mixed = run("replay", "--config", low, "--config", wide, "--strategy", "tiered", MSA)
    assert mixed.returncode == 2
    assert "--strategy with several --config files" in mixed.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--strategy", "tool-result-hiding", "--param", "keep_recent=3"],
         "error: --param: bad params for ToolResultHiding(): unknown parameter 'keep_recent'"),
        (["--strategy", "tool-result-hiding", "--param", "preserve_recent_n=-3"],
         "error: --param preserve_recent_n: must be >= 0, got -3 (strategy 'tool-result-hiding')"),
        (["--config", "examples/recommended.toml", "--param", "nope=1"],
         "error: --param: bad params for Tiered(): unknown parameter 'nope'"),
    ],
)  # fmt: skip
def test_a_bad_param_is_blamed_on_the_flag_not_on_a_config_key(
    flags: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctxcompact", "replay", *flags],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=TRACES_DIR.parents[2],  # examples/ is relative to the checkout
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "compaction.params" not in done.stderr
    assert "(at " not in done.stderr


def test_a_bad_param_in_the_file_is_still_the_file_s(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[compaction]\nstrategy = "tiered"\n[compaction.params]\nbogus = 1\n')
    done = run("replay", "--config", bad, "--param", "fill=0.5")
    assert done.returncode == 2
    assert f"{bad}, key 'compaction.params'" in done.stderr
    assert "unknown parameter 'bogus'" in done.stderr


@pytest.mark.parametrize("flag", ["--config", "--strategy"])
def test_apply_refuses_a_flag_it_takes_once_given_twice(tmp_path: Path, flag: str) -> None:
    # argparse's "store" would keep the second value without a word.
    one = _tiered_config(tmp_path / "one.toml", 0.4) if flag == "--config" else "tiered"
    two = _tiered_config(tmp_path / "two.toml", 0.6) if flag == "--config" else "context-guard"
    done = run("apply", SMALL, flag, one, flag, two, "-o", tmp_path / "out.json")
    assert done.returncode == 2
    assert f"{flag} is given twice: this command takes one" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_plot_refuses_a_file_name_that_is_not_a_png(tmp_path: Path) -> None:
    done = run("replay", SMALL, "--plot", tmp_path / "out.txt")
    assert done.returncode == 2
    assert "--plot writes a PNG image: give a file name ending in .png" in done.stderr
    assert not (tmp_path / "out.txt").exists()


def test_apply_reports_schema1_fields_and_writes_the_input_format(tmp_path: Path) -> None:
    out = tmp_path / "compacted.json"
    result = run(
        "apply", MSA, "--strategy", "schema1-masking", "--param", "window_turns=5",
        "-o", out, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert_shape(
        report,
        {
            "schema": str,
            "file": str,
            "format": str,
            "strategy": str,
            "status": str,
            "error": type(None),
            "messages_before": int,
            "messages_after": int,
            "masked_tool_results": int,
            "tool_chars_before": int,
            "tool_chars_after": int,
            "tokens_before": int,
            "tokens_after": int,
        },
    )
    assert (report["schema"], report["format"], report["status"]) == (
        "ctxcompact.apply/1",
        "openai",
        "compacted",
    )
    original = json.loads(MSA.read_text("utf-8"))
    written = json.loads(out.read_text("utf-8"))
    assert report["messages_before"] == report["messages_after"] == len(written) == len(original)
    assert report["masked_tool_results"] > 0
    assert report["tool_chars_after"] < report["tool_chars_before"]
    assert report["tokens_after"] < report["tokens_before"]
    changed = [i for i, (a, b) in enumerate(zip(original, written, strict=True)) if a != b]
    assert len(changed) == report["masked_tool_results"]
    assert all(written[i]["role"] == "tool" for i in changed)
    assert check_history(from_openai(written)) == []


def test_apply_keeps_an_anthropic_body_anthropic(tmp_path: Path) -> None:
    body = {
        "model": "claude-x",
        "max_tokens": 64,
        "system": "be brief",
        "messages": [
            {"role": "user", "content": "look"},
            *[
                message
                for i in range(3)
                for message in (
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": f"t{i}", "name": "ls", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 500}
                        ],
                    },
                )
            ],
        ],
    }
    src, out = tmp_path / "body.json", tmp_path / "out.json"
    src.write_text(json.dumps(body), encoding="utf-8")
    result = run("apply", src, "--strategy", "tool-result-hiding", "--param", "preserve_recent_n=1",
                 "-o", out)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "(anthropic)" in result.stdout
    assert "masked tool results        2" in result.stdout
    written = json.loads(out.read_text("utf-8"))
    assert (written["model"], written["system"]) == ("claude-x", "be brief")
    results = [m["content"][0]["content"] for m in written["messages"][2::2]]
    assert results[-1] == "x" * 500
    assert all(r != "x" * 500 for r in results[:-1])


def test_validate_reports_problems_with_their_index(tmp_path: Path) -> None:
    broken = json.loads(SMALL.read_text("utf-8"))
    broken.insert(3, {"role": "tool", "tool_call_id": "nobody", "content": "orphan"})
    bad = tmp_path / "orphan.json"
    bad.write_text(json.dumps(broken), encoding="utf-8")
    ok = run("validate", SMALL, MSA)
    assert ok.returncode == 0, ok.stderr
    assert f"{SMALL}: 62 messages, ok" in ok.stdout
    result = run("validate", SMALL, bad, "--json")
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert set(doc) == {"schema", "valid", "files"}
    assert (doc["schema"], doc["valid"]) == ("ctxcompact.validate/1", False)
    good, wrong = doc["files"]
    assert set(good) == {"file", "error", "format", "messages", "valid", "problems"}
    assert (good["valid"], good["problems"]) == (True, [])
    assert wrong["valid"] is False
    assert {"index": 3, "kind": "orphan_result"}.items() <= wrong["problems"][0].items()
    assert isinstance(wrong["problems"][0]["message"], str)


@pytest.mark.parametrize(
    ("command", "content", "expected"),
    [
        ("replay", '[{"role": "user", "content": "a"},\n {"content": ]', "line 2, column 14"),
        ("apply", '[{"role": "user", "content": "a"}, {"role": "robot"}]', "message 1, field"),
        ("validate", '{"model": "x"}', "expected a JSON list of messages"),
    ],
)
def test_bad_files_exit_2_naming_the_file_and_message(
    tmp_path: Path, command: str, content: str, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    extra = ["--strategy", "tool-result-hiding"] if command == "apply" else []
    result = run(command, bad, *extra)
    assert result.returncode == 2
    assert result.stderr.startswith(f"ctxcompact: error: {bad}: ")
    assert expected in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_file_and_bad_usage_exit_2(tmp_path: Path) -> None:
    missing = run("replay", tmp_path / "nope.json")
    assert missing.returncode == 2
    assert f"{tmp_path / 'nope.json'}: no such file" in missing.stderr
    usage = run("replay", "--cached-price", "2")
    assert usage.returncode == 2
    assert "--cached-price must be between 0 and 1" in usage.stderr


def test_a_strategy_that_needs_an_llm_fails_without_one() -> None:
    result = run("replay", MSA, "--strategy", "llm-summary", "--json")
    assert result.returncode == 2
    assert "needs an LLM and none is configured" in result.stderr
    assert result.stdout == ""  # no report built on a fake or missing summary


def test_strategies_lists_builtins_with_parameters_as_text_and_json() -> None:
    text = run("strategies")
    assert text.returncode == 0
    for name in ("tool-result-hiding", "schema1-masking", "llm-summary", "context-guard"):
        assert f"{name}  (ctxcompact.strategies:" in text.stdout
    assert "preserve_recent_n: int = 5" in text.stdout
    doc = json.loads(run("strategies", "--json").stdout)
    assert doc["schema"] == "ctxcompact.strategies/1"
    by_name = {s["name"]: s for s in doc["strategies"]}
    hiding = by_name["tool-result-hiding"]
    assert set(hiding) == {"name", "target", "summary", "error", "dependencies", "params"}
    assert hiding["target"] == "ctxcompact.strategies:ToolResultHiding"
    params = {p["name"]: p for p in hiding["params"]}
    assert params["preserve_recent_n"] == {
        "name": "preserve_recent_n",
        "annotation": "int",
        "required": False,
        "default": 5,
    }
    assert [d["name"] for d in by_name["llm-summary"]["dependencies"]] == ["llm"]


def test_plot_without_matplotlib_says_which_extra_to_install(tmp_path: Path) -> None:
    # The real entry point, in a process where matplotlib cannot be imported.
    code = (
        "import sys; sys.modules['matplotlib'] = None; from ctxcompact.cli import main; "
        f"sys.exit(main(['replay', '--plot', {str(tmp_path / 'x.png')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "pip install 'ctxcompact[plot]'" in result.stderr
    assert result.stdout == ""  # failed before replaying anything
    assert not (tmp_path / "x.png").exists()


class _ChatServer(ThreadingHTTPServer):
    """A local OpenAI-compatible endpoint that answers every chat completion the same way."""

    requests: list[dict[str, Any]]


class _ChatHandler(BaseHTTPRequestHandler):
    server: _ChatServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        payload = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Summary: totals round half-up."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_replay_uses_the_configured_llm_and_meters_the_summarizer(tmp_path: Path) -> None:
    server = _ChatServer(("127.0.0.1", 0), _ChatHandler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = tmp_path / "ctxcompact.toml"
        config.write_text(
            "[compaction]\n"
            'strategy = "llm-summary"\n'
            "max_context_size = 16000\n"
            "reserved_context_size = 4000\n"
            "[compaction.llm]\n"
            'provider = "openai"\n'
            'model = "local-model"\n'
            f'base_url = "http://127.0.0.1:{server.server_address[1]}/v1"\n'
            'api_key_env = "CTXCOMPACT_TEST_KEY"\n'
            "max_retries = 0\n",
            encoding="utf-8",
        )
        env = {**os.environ, "CTXCOMPACT_TEST_KEY": "sk-test"}
        result = subprocess.run(
            [sys.executable, "-m", "ctxcompact", "replay", "--config", str(config), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    run_ = json.loads(result.stdout)["total"]["runs"][0]
    assert run_["strategy"] == "llm-summary"
    calls = len(server.requests)
    assert calls >= 1
    assert run_["compacted"]["summarizer_calls"] == calls
    assert run_["compacted"]["summarizer_tokens"] == 1020 * calls  # the server's usage
    assert run_["compacted"]["compactions"] >= 1
    assert run_["ratios"]["input_tokens"] < 1
    assert all(r["model"] == "local-model" for r in server.requests)
