"""A summarizer that fits its own model, a strategy that needs one failing at setup, the
``--llm-*`` flags through the real OpenAI SDK against a local fake server, and per-call
progress for single-file replays with a summarizer."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ctxcompact import (
    CompactionContext,
    Config,
    HeuristicTokenCounter,
    Message,
    NeedsLLM,
    has_context_window,
    needs_llm,
    wire,
)
from ctxcompact.cli import main
from ctxcompact.exceptions import LLMRequiredError
from ctxcompact.replay import MeteredLLM
from ctxcompact.strategies import HidingThenSummary, LLMSummary, Pipeline, ToolResultHiding
from ctxcompact.testing import ScriptedLLM
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread
from tests.helpers.standin_summarizer import StandIn
from tests.helpers.traces import TRACES_DIR

NEVER_TRIGGERS = TRACES_DIR / "taubench-gpt4o-airline__task3_trial0.json"
LONG = TRACES_DIR / "msa-gemini3pro__astropy__astropy-8872.json"


class WindowedLLM(ScriptedLLM):
    """A scripted summarizer that states a small window of its own, like a local model."""

    context_window = 2048


def long_history(turns: int = 40) -> list[Message]:
    history = [user("refactor the parser")]
    for k in range(turns):
        history += [assistant(None, call(f"c{k}", "read")), tool(f"c{k}", f"line {k} " * 200)]
    return [*history, assistant("done"), user("thanks"), assistant("welcome")]


# -- the summarizer's own window ---------------------------------------------------------------


def test_a_summarizer_with_a_small_window_gets_a_request_and_answer_that_fit_it() -> None:
    llm = WindowedLLM("a short summary of the refactoring")
    history = long_history()
    before = list(history)
    counter = HeuristicTokenCounter()
    ctx = CompactionContext(history, counter.count(history), 200_000, 10_000, llm=llm)
    out = asyncio.run(LLMSummary().compact(ctx))
    assert out is not None
    assert history == before
    (request,) = llm.requests
    assert request.max_tokens == 2048 // 4  # not the default 4096: it would not fit
    sent = counter.count([Message.system(request.system or ""), *request.messages])
    assert sent <= 2048 - 2048 // 4


def test_without_a_window_the_summarizer_keeps_its_configured_budget() -> None:
    llm = ScriptedLLM("a short summary of the refactoring")
    history = long_history()
    ctx = CompactionContext(history, 1, 200_000, 10_000, llm=llm)
    asyncio.run(LLMSummary(max_summary_tokens=1000).compact(ctx))
    assert llm.requests[0].max_tokens == 1000
    assert not has_context_window(llm)


def test_metered_llm_forwards_the_window() -> None:
    metered = MeteredLLM(WindowedLLM(), HeuristicTokenCounter())
    assert has_context_window(metered)
    assert metered.context_window == 2048


def llm_config(**llm: object) -> Config:
    table = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", **llm}
    return Config.from_dict(
        {
            "compaction": {
                "strategy": "llm-summary",
                "max_context_size": 100_000,
                "reserved_context_size": 1_000,
                "llm": table,
            }
        }
    )


def test_the_configured_context_window_reaches_the_adapter() -> None:
    wiring = wire(llm_config(model="gemma-3-270m", context_window=2048))
    assert has_context_window(wiring.llm)
    assert wiring.llm.context_window == 2048


def test_without_a_configured_window_the_model_table_gives_it() -> None:
    from ctxcompact import context_window

    wiring = wire(llm_config(model="gpt-4o-mini"))
    assert wiring.llm is not None
    assert getattr(wiring.llm, "context_window", None) == context_window("gpt-4o-mini")
    unknown = wire(llm_config(model="my-local-finetune"))
    assert not has_context_window(unknown.llm)


# -- a strategy that needs an LLM fails at setup -----------------------------------------------


def test_summarizing_strategies_say_they_need_an_llm_until_given_one() -> None:
    assert isinstance(LLMSummary(), NeedsLLM)
    assert needs_llm(LLMSummary())
    assert not needs_llm(LLMSummary(ScriptedLLM()))
    assert needs_llm(HidingThenSummary())
    assert not needs_llm(HidingThenSummary(ScriptedLLM()))
    assert needs_llm(Pipeline(ToolResultHiding(), LLMSummary()))
    assert not needs_llm(Pipeline(ToolResultHiding()))
    assert not needs_llm(ToolResultHiding())


@pytest.mark.parametrize(
    ("strategy", "params"),
    [
        ("llm-summary", {}),
        ("hiding-then-summary", {}),
        ("pipeline", {"steps": ["tool-result-truncation", "llm-summary"]}),
    ],
)
def test_wire_refuses_a_summarizing_strategy_without_an_llm(
    strategy: str, params: dict[str, object]
) -> None:
    config = Config.from_dict(
        {"compaction": {"strategy": strategy, "max_context_size": 10_000,
                        "reserved_context_size": 100, "params": params}}
    )  # fmt: skip
    with pytest.raises(LLMRequiredError, match=rf"'{strategy}'.*\[compaction\.llm\]"):
        wire(config)
    assert wire(config, llm=ScriptedLLM()).llm is not None


def test_replay_fails_before_replaying_when_the_strategy_needs_an_llm(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # This trace never reaches the trigger: before, the replay exited 0 with no summary.
    assert main(["replay", str(NEVER_TRIGGERS), "--strategy", "llm-summary", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "needs an LLM" in captured.err
    assert "--llm-base-url" in captured.err


def test_apply_fails_the_same_way(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.json"
    code = main(["apply", str(NEVER_TRIGGERS), "--strategy", "hiding-then-summary", "-o", str(out)])
    assert code == 2
    assert not out.exists()
    assert "needs an LLM" in capsys.readouterr().err


# -- the --llm-* flags, through the real SDK ---------------------------------------------------

SMALL = ["--max-context-size", "16000", "--reserved", "4000"]


def test_llm_flags_make_an_openai_compatible_summarizer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        code = main(["replay", str(LONG), "--strategy", "llm-summary", *SMALL, "--json",
                     "--llm-base-url", f"{url}/v1", "--llm-model", "local-summarizer"])  # fmt: skip
    assert code == 0
    run = json.loads(capsys.readouterr().out)["files"][0]["runs"][0]["compacted"]
    chats = [r for r in fake.received if r.path == "/v1/chat/completions"]
    assert run["compactions"] >= 1
    assert run["summarizer_calls"] == len(chats) >= 1
    assert {r.json()["model"] for r in chats} == {"local-summarizer"}


def test_llm_api_key_env_names_the_variable_the_key_is_read_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SUMMARIZER_KEY", "sk-test-123")
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        code = main(["apply", str(NEVER_TRIGGERS), "--strategy", "llm-summary", "-o",
                     str(tmp_path / "out.json"), "--llm-base-url", f"{url}/v1",
                     "--llm-model", "m", "--llm-api-key-env", "MY_SUMMARIZER_KEY"])  # fmt: skip
    capsys.readouterr()
    assert code == 0
    (request,) = [r for r in fake.received if r.path == "/v1/chat/completions"]
    assert request.headers["authorization"] == "Bearer sk-test-123"


def test_llm_base_url_without_a_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--llm-base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--llm-model" in capsys.readouterr().err


# -- progress ----------------------------------------------------------------------------------


def test_a_verbose_single_file_replay_with_a_summarizer_reports_progress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake = FakeUpstream()
    flags = ["--strategy", "llm-summary", *SMALL, "--llm-base-url"]
    with serve_in_thread(fake.app()) as url:
        assert main(["replay", str(LONG), *flags, f"{url}/v1", "--llm-model", "m"]) == 0
        quiet = capsys.readouterr().err
        assert main(["replay", str(LONG), *flags, f"{url}/v1", "--llm-model", "m", "-v"]) == 0
        verbose = capsys.readouterr().err
    calls = sum(1 for m in json.loads(LONG.read_text("utf-8")) if m["role"] == "assistant")
    assert "call " not in quiet  # not a terminal, not verbose: nothing
    lines = [line for line in verbose.splitlines() if ": llm-summary: call " in line]
    assert 1 < len(lines) <= 11
    assert lines[-1].endswith(f"call {calls} of {calls}")


def test_no_progress_without_a_summarizer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(LONG), *SMALL, "-v"]) == 0
    assert ": call " not in capsys.readouterr().err


def test_llm_context_window_bounds_the_summary_the_server_is_asked_for(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake = FakeUpstream()
    with serve_in_thread(fake.app()) as url:
        local = ["--llm-base-url", f"{url}/v1", "--llm-model", "gemma-3-270m"]
        code = main(["replay", str(LONG), "--strategy", "llm-summary", *SMALL, *local,
                     "--llm-context-window", "2048"])  # fmt: skip
    capsys.readouterr()
    assert code == 0
    chats = [r.json() for r in fake.received if r.path == "/v1/chat/completions"]
    assert chats
    limits = {body.get("max_tokens", body.get("max_completion_tokens")) for body in chats}
    assert limits == {2048 // 4}


def test_llm_context_window_without_a_model_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", "--llm-context-window", "2048"]) == 2
    assert "--llm-model" in capsys.readouterr().err


# -- the summarizer's timeout and retries ------------------------------------------------------


@pytest.mark.parametrize(("retries", "attempts"), [(0, 1), (1, 2)])
def test_llm_timeout_and_retries_are_what_the_summarizer_gets(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    retries: int,
    attempts: int,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    slow = StandIn(delay=3.0)  # longer than the timeout: every attempt times out
    with serve_in_thread(slow.app()) as url:
        out = str(tmp_path / "o.json")
        code = main(["apply", str(LONG), "--strategy", "llm-summary", "-o", out,
                     "--llm-base-url", f"{url}/v1", "--llm-model", "m", "--llm-timeout", "0.3",
                     "--llm-retries", str(retries)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert "LLMTimeoutError" in err
    assert len(slow.requests) == attempts


def test_llm_timeout_and_retries_apply_to_the_configs_summarizer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    slow = StandIn(delay=3.0)
    with serve_in_thread(slow.app()) as url:
        path = tmp_path / "c.toml"
        path.write_text(
            f'[compaction]\nstrategy = "llm-summary"\n[compaction.llm]\nprovider = "openai"\n'
            f'model = "m"\nbase_url = "{url}/v1"\ntimeout = 600\nmax_retries = 5\n'
        )
        code = main(["apply", str(LONG), "--config", str(path), "-o", str(tmp_path / "o.json"),
                     "--llm-timeout", "0.3", "--llm-retries", "0"])  # fmt: skip
    assert code == 1
    assert "LLMTimeoutError" in capsys.readouterr().err
    assert len(slow.requests) == 1


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--llm-timeout", "5"], "--llm-timeout needs a summarizer"),
        (["--llm-retries", "1"], "--llm-retries needs a summarizer"),
        (["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-timeout", "0"],
         "--llm-timeout must be a finite number of seconds > 0"),
        (["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-timeout", "inf"],
         "--llm-timeout must be a finite number of seconds > 0, got inf"),
        (["--llm-base-url", "http://127.0.0.1:9/v1", "--llm-model", "m", "--llm-retries", "-1"],
         "--llm-retries must be 0 to 20"),
    ],
)  # fmt: skip
def test_llm_timeout_and_retries_without_a_summarizer_or_out_of_range_are_usage_errors(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["replay", *flags]) == 2
    assert message in capsys.readouterr().err
