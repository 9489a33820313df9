"""build_llm from [compaction.llm], lazy SDK imports and the missing-SDK error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from ctxcompact import LLM, LLMConfig, Message
from ctxcompact.exceptions import AuthenticationError, ConfigError, ServerError
from ctxcompact.llm import LOCAL_PLACEHOLDER_KEY, RetryEvent, build_llm
from ctxcompact.llm.anthropic import AnthropicLLM
from ctxcompact.llm.openai import OpenAIChatLLM
from tests.conftest import ROOT
from tests.helpers.llm_wire import FAKE_KEY, Wire, anthropic_reply, error_body, openai_reply


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


async def test_an_openai_config_builds_an_adapter_with_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUMMARIZER_KEY", FAKE_KEY)
    config = LLMConfig(
        provider="openai",
        model="qwen3-8b",
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="SUMMARIZER_KEY",
        timeout=12.5,
        max_retries=4,
        max_tokens=256,
    )
    wire = Wire(openai_reply("summary"))

    llm = build_llm(config, http_client=wire.client())
    completion = await llm.complete([Message.user("hi")])

    assert isinstance(llm, OpenAIChatLLM)
    assert isinstance(llm, LLM)
    assert completion.message.text == "summary"
    assert llm.client.max_retries == 4
    assert llm.client.timeout == 12.5
    request = wire.requests[0]
    assert str(request.url) == "http://127.0.0.1:8000/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"
    assert wire.body["model"] == "qwen3-8b"
    assert wire.body["max_tokens"] == 256
    assert FAKE_KEY not in repr(llm)


async def test_an_anthropic_config_builds_an_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    config = LLMConfig(provider="anthropic", model="claude-haiku-4-5", max_tokens=512)
    wire = Wire(anthropic_reply())

    llm = build_llm(config, http_client=wire.client())
    await llm.complete([Message.user("hi")])

    assert isinstance(llm, AnthropicLLM)
    assert wire.body["model"] == "claude-haiku-4-5"
    assert wire.body["max_tokens"] == 512
    assert str(wire.requests[0].url) == "https://api.anthropic.com/v1/messages"


def test_no_key_and_no_base_url_names_the_variable_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        build_llm(LLMConfig(provider="openai", model="gpt-4o-mini"))


async def test_a_local_server_without_a_key_gets_a_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = LLMConfig(provider="openai", model="llama", base_url="http://127.0.0.1:8080/v1")
    wire = Wire(openai_reply())
    await build_llm(config, http_client=wire.client()).complete([Message.user("hi")])
    assert wire.requests[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def test_an_unknown_provider_is_a_config_error() -> None:
    config = LLMConfig.model_construct(provider="mistral", model="m")
    with pytest.raises(ConfigError, match="unknown provider 'mistral'"):
        build_llm(config)


async def test_retries_from_the_config_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    events: list[RetryEvent] = []
    busy = {"retry-after": "0.01"}
    wire = Wire(
        error_body(502, "bad gateway", headers=busy), error_body(502, "again", headers=busy)
    )
    config = LLMConfig(provider="openai", model="m", max_retries=1)

    llm = build_llm(config, on_retry=events.append, http_client=wire.client())
    with pytest.raises(ServerError):
        await llm.complete([Message.user("hi")])

    assert len(wire.requests) == 2
    assert [(e.attempt, e.max_retries, e.status_code) for e in events] == [(1, 1, 502)]


def test_importing_ctxcompact_and_its_llm_package_imports_no_sdk() -> None:
    result = run_python(
        """
        import sys
        import ctxcompact, ctxcompact.llm
        from ctxcompact.llm import build_llm, RetryEvent
        print(sorted(m for m in ("openai", "anthropic", "httpx2") if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("sdk", "module", "provider"),
    [
        ("openai", "ctxcompact.llm.openai", "openai"),
        ("anthropic", "ctxcompact.llm.anthropic", "anthropic"),
    ],
)
def test_a_missing_sdk_names_the_pip_line(sdk: str, module: str, provider: str) -> None:
    # sys.modules[name] = None makes `import name` raise ImportError, as if not installed.
    result = run_python(
        f"""
        import sys
        sys.modules[{sdk!r}] = None
        from ctxcompact.exceptions import MissingDependencyError
        from ctxcompact._config.config import LLMConfig
        from ctxcompact.llm import build_llm
        try:
            import {module}
        except MissingDependencyError as exc:
            print("import:", exc)
        try:
            build_llm(LLMConfig(provider={provider!r}, model="m", base_url="http://x/v1"))
        except MissingDependencyError as exc:
            print("build:", exc.extra, exc)
        """
    )
    assert result.returncode == 0, result.stderr
    line = f"pip install 'ctxcompact[{sdk}]'"
    import_line, build_line = result.stdout.strip().splitlines()
    assert import_line.startswith("import:")
    assert import_line.endswith(line)
    assert build_line.startswith(f"build: {sdk} ")
    assert build_line.endswith(line)


def test_the_adapters_are_reachable_from_the_llm_package() -> None:
    import ctxcompact.llm as llm_package

    assert llm_package.OpenAIChatLLM is OpenAIChatLLM
    assert llm_package.AnthropicLLM is AnthropicLLM
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = llm_package.Nope


async def test_an_adapter_closes_the_client_it_built_but_not_a_given_one() -> None:
    async with OpenAIChatLLM("m", api_key=FAKE_KEY) as built:
        assert not built.client.is_closed()
    assert built.client.is_closed()

    wire = Wire()
    given = wire.client()
    async with AnthropicLLM("m", api_key=FAKE_KEY, http_client=given):
        pass
    assert not given.is_closed
    await given.aclose()
