"""load_config and the Config models: defaults, the example file, every error path."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pydantic
import pytest

from ctxcompact import (
    LLM,
    CompactionConfig,
    Completion,
    Config,
    ContextGuardConfig,
    LLMConfig,
    Message,
    Schema1Config,
    TruncationConfig,
    load_config,
    load_strategy,
)
from ctxcompact.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config.example.toml"
ENGLISH_PLACEHOLDER = (
    "[Observation masked: old tool result "
    "(tool_call_id={tool_call_id}, tool={tool_name}, chars={original_chars})]"
)
SECRET = "sk-test-5ecret-value-0123456789"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ctxcompact.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def config_error(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value


# -- defaults and the example ------------------------------------------------------------


def test_defaults_match_the_agreed_values() -> None:
    config = Config()
    c = config.compaction
    assert (c.strategy, c.max_context_size, c.reserved_context_size, c.trigger_ratio) == (
        "ctxcompact.strategies:LLMSummary",
        None,
        50_000,
        None,
    )
    assert (c.min_progress, c.max_failures, c.params, c.llm) == (0.1, 3, {}, None)
    s = config.observation_masking.schema1
    assert (s.enabled, s.window_turns, s.keep_errors, s.keep_last_k_per_tool) == (
        False,
        8,
        True,
        0,
    )
    # Unset batch_turns: by window_turns; only a history over the window is masked.
    assert (s.batch_turns, s.clear_at_least, s.always) == (None, 0, False)
    assert s.placeholder_template == ENGLISH_PLACEHOLDER
    t = config.tool_result_truncation
    assert (t.enabled, t.max_chars, t.head_chars, t.tail_chars) == (False, 50_000, 2_000, 2_000)
    g = config.context_guard
    # None: the guard's own default (8,192 with the window the wiring gives it).
    assert (g.enabled, g.reserve_tokens, g.truncate_first) == (False, None, True)
    assert (g.max_tool_result_chars, g.head_chars, g.tail_chars) == (50_000, 2_000, 2_000)
    assert type(c.reserved_context_size) is int  # the "not set" marker never leaks out
    assert (config.token_counting.method, config.token_counting.encoding) == (
        "heuristic",
        "cl100k_base",
    )
    assert (config.agent.max_steps, config.agent.system_prompt, config.agent.llm) == (
        50,
        None,
        None,
    )
    p = config.proxy
    assert (p.host, p.port, p.timeout, p.max_body_bytes) == ("127.0.0.1", 8787, 600.0, 33_554_432)
    assert p.keep_alive_timeout == 120
    assert (p.openai_base_url, p.anthropic_base_url) == (
        "https://api.openai.com/v1",
        "https://api.anthropic.com",
    )
    assert config.path is None


def test_empty_file_gives_the_defaults_and_remembers_its_path(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    config = load_config(path)
    assert config.model_dump() == Config().model_dump()
    assert config.path == path
    assert config.model_copy(update={}).path == path


def test_example_config_loads() -> None:
    config = load_config(EXAMPLE)
    assert config.path == EXAMPLE
    assert config.compaction.strategy == "hiding-then-summary"
    assert config.compaction.max_context_size == 128_000
    assert config.compaction.llm is not None
    assert config.compaction.llm.api_key_env == "OPENAI_API_KEY"


class _EchoLLM:
    async def complete(
        self,
        messages: object,
        *,
        system: object = None,
        tools: object = None,
        max_tokens: object = None,
    ) -> Completion:
        return Completion(Message.assistant("summary"))


def test_example_strategy_and_params_load_through_the_loader() -> None:
    config = load_config(EXAMPLE)
    strategy = load_strategy(
        config.compaction.strategy,
        dependencies={LLM: _EchoLLM()},
        params=config.compaction.params,
    )
    assert type(strategy).__name__ == "HidingThenSummary"


def _model_keys(model: type[pydantic.BaseModel], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        if getattr(info.annotation, "__origin__", None) is list:
            keys.add(prefix + name)  # a list of tables (fallbacks): one documented key
            continue
        sub = next(
            (
                a
                for a in (*getattr(info.annotation, "__args__", ()), info.annotation)
                if isinstance(a, type) and issubclass(a, pydantic.BaseModel)
            ),
            None,
        )
        if sub is None:
            keys.add(prefix + name)
        else:
            keys |= _model_keys(sub, f"{prefix}{name}.")
    return keys


def _documented_keys(text: str) -> set[str]:
    keys: set[str] = set()
    table = ""
    for line in text.splitlines():
        stripped = line.lstrip("# ").strip()
        header = re.fullmatch(r"\[([\w.]+)\]", stripped)
        if header:
            table = re.sub(r"^pricing\.\w+\.", "pricing.", header[1] + ".")  # a named table
            if table in ("compaction.params.", "compaction.llm.", "agent.llm."):
                keys.add(table[:-1])
            continue
        key = re.match(r"(\w+) = ", stripped)
        if key and not table.startswith("compaction.params"):
            keys.add(table + key[1])
    return keys


def test_example_documents_every_key_with_a_comment() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    expected = _model_keys(Config)
    llm_keys = {
        k.removeprefix("compaction.llm.") for k in expected if k.startswith("compaction.llm.")
    }
    documented = _documented_keys(text)
    missing = {k for k in expected if k not in documented and not k.startswith("agent.llm.")}
    assert not missing, f"config.example.toml does not document: {sorted(missing)}"
    assert {f"compaction.llm.{k}" for k in llm_keys} <= documented
    # Every key line is preceded by a comment line.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\w+ = ", line):
            assert lines[i - 1].startswith("#"), f"no comment above line {i + 1}: {line}"


# -- every error path ---------------------------------------------------------------------


def test_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found") as info:
        load_config(tmp_path / "missing.toml")
    assert info.value.path == str(tmp_path / "missing.toml")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[agent]\nsystem_prompt = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


def test_toml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[compaction]\nmax_context_size = 1000\nstrategy == 'x'\n")
    assert "invalid TOML at line 3, column 11" in str(error)
    assert error.key is None


def test_unterminated_toml_at_end_of_file(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[compaction]\nstrategy = "x')
    assert "invalid TOML" in str(error)
    assert re.search(r"line \d+|end of the file", str(error))


def test_unknown_key_suggests_the_close_match(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[compaction]\nreserved_contex_size = 10\n")
    assert error.key == "compaction.reserved_contex_size"
    assert "unknown key; did you mean 'reserved_context_size'?" in str(error)


def test_unknown_nested_table_and_key(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[observation_masking.schema2]\nenabled = true\n")
    assert error.key == "observation_masking.schema2"
    assert "did you mean 'schema1'" in str(error)
    error = config_error(tmp_path, "[observation_masking.schema1]\nwindow = 3\n")
    assert error.key == "observation_masking.schema1.window"
    assert "did you mean 'window_turns'" in str(error)


def test_key_in_the_wrong_table_names_its_table(tmp_path: Path) -> None:
    error = config_error(tmp_path, 'strategy = "llm-summary"\n')
    assert error.key == "strategy"
    assert "'strategy' belongs in [compaction]" in str(error)


def test_unknown_key_without_a_match_lists_the_known_keys(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[token_counting]\nzzz = 1\n")
    assert "known keys here: method, encoding" in str(error)


def test_path_cannot_be_set_from_the_file(tmp_path: Path) -> None:
    error = config_error(tmp_path, 'path = "/etc/passwd"\n')
    assert error.key == "path"
    assert "unknown key" in str(error)


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ("[compaction]\nreserved_context_size = -1", "compaction.reserved_context_size", "0 <= "),
        (
            "[compaction]\ntrigger_ratio = 0.3",
            "compaction.trigger_ratio",
            "0.5 <= trigger_ratio <= 0.99",
        ),
        (
            "[compaction]\ntrigger_ratio = 1.0",
            "compaction.trigger_ratio",
            "0.5 <= trigger_ratio <= 0.99",
        ),
        (
            "[compaction]\nmin_progress = 1.0",
            "compaction.min_progress",
            "0.0 <= min_progress < 1.0",
        ),
        (
            "[compaction]\nmax_context_size = 0",
            "compaction.max_context_size",
            "1 <= max_context_size",
        ),
        ("[compaction]\nmax_failures = 0", "compaction.max_failures", "1 <= max_failures"),
        ("[proxy]\nport = 70000", "proxy.port", "0 <= port <= 65535"),
        ("[proxy]\ntimeout = 0.0", "proxy.timeout", "0 < timeout"),
        ("[agent]\nmax_steps = 0", "agent.max_steps", "1 <= max_steps"),
        (
            '[compaction.llm]\nprovider = "openai"\nmodel = "m"\nmax_retries = 99',
            "compaction.llm.max_retries",
            "0 <= max_retries <= 20",
        ),
    ],
)
def test_out_of_range_values_say_the_allowed_range(
    tmp_path: Path, text: str, key: str, allowed: str
) -> None:
    error = config_error(tmp_path, text + "\n")
    assert error.key == key
    assert "out of range" in str(error)
    assert allowed in str(error)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            '[compaction.llm]\nprovider = "openai"\nmodel = "m"\ntimeout = inf',
            "compaction.llm.timeout",
        ),
        ("[proxy]\ntimeout = nan", "proxy.timeout"),
    ],
)
def test_a_timeout_must_be_finite(tmp_path: Path, text: str, key: str) -> None:
    # An infinite timeout would let one summarizer or upstream request hang for ever.
    error = config_error(tmp_path, text + "\n")
    assert error.key == key
    assert "finite number" in str(error)


def test_reserved_must_be_below_max(tmp_path: Path) -> None:
    text = "[compaction]\nmax_context_size = 8000\nreserved_context_size = 8000\n"
    error = config_error(tmp_path, text)
    assert error.key == "compaction.reserved_context_size"
    assert "must be below max_context_size (8000)" in str(error)
    ok = load_config(
        write(
            tmp_path, text.replace("reserved_context_size = 8000", "reserved_context_size = 7999")
        )
    )
    assert (ok.compaction.max_context_size, ok.compaction.reserved_context_size) == (8000, 7999)


def test_unknown_provider(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[compaction.llm]\nprovider = "gemini"\nmodel = "m"\n')
    assert error.key == "compaction.llm.provider"
    assert "unknown provider 'gemini'; expected 'openai' or 'anthropic'" in str(error)


def test_llm_table_needs_provider_and_model(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[agent.llm]\ntimeout = 5.0\n")
    assert error.key == "agent.llm.provider"
    assert "required key is missing" in str(error)
    assert "agent.llm.model: required key is missing" in str(error)


def test_wrong_type_is_not_coerced(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[compaction]\nmax_context_size = "128000"\n')
    assert error.key == "compaction.max_context_size"
    assert "valid integer (got str '128000')" in str(error)
    error = config_error(tmp_path, "[observation_masking.schema1]\nenabled = 1\n")
    assert "valid boolean" in str(error)


def test_unknown_token_counting_method(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[token_counting]\nmethod = "words"\n')
    assert "not allowed 'words'; expected 'heuristic' or 'tiktoken'" in str(error)


def test_malformed_strategy_spec(tmp_path: Path) -> None:
    error = config_error(tmp_path, '[compaction]\nstrategy = "my module:Thing"\n')
    assert error.key == "compaction.strategy"
    assert "package.module:ClassName" in str(error)


def test_bad_urls(tmp_path: Path) -> None:
    assert "http://" in str(config_error(tmp_path, '[proxy]\nopenai_base_url = "api.openai.com"\n'))
    text = '[compaction.llm]\nprovider = "openai"\nmodel = "m"\nbase_url = "localhost:8080"\n'
    assert config_error(tmp_path, text).key == "compaction.llm.base_url"


def test_default_reserved_must_be_below_max_too(tmp_path: Path) -> None:
    # Used to load, and only failed when the controller was built, without a file name.
    error = config_error(tmp_path, "[compaction]\nmax_context_size = 1000\n")
    assert error.key == "compaction.reserved_context_size"
    assert "must be below max_context_size (1000)" in str(error)
    assert "not set, and the default is 50000" in str(error)
    # A value the user wrote is quoted as such, not as the default.
    error = config_error(
        tmp_path, "[compaction]\nmax_context_size = 1000\nreserved_context_size = 1000\n"
    )
    assert "got 1000" in str(error)
    assert "the default is" not in str(error)
    ok = load_config(write(tmp_path, "[compaction]\nmax_context_size = 50001\n"))
    assert ok.compaction.reserved_context_size == 50_000
    with pytest.raises(pydantic.ValidationError, match="the default is 50000"):
        CompactionConfig(max_context_size=50_000)


def test_context_guard_table(tmp_path: Path) -> None:
    text = """\
        [context_guard]
        enabled = true
        reserve_tokens = 1000
        truncate_first = false
        max_tool_result_chars = 9000
        head_chars = 100
        tail_chars = 200
        """
    g = load_config(write(tmp_path, text)).context_guard
    assert (g.enabled, g.reserve_tokens, g.truncate_first) == (True, 1000, False)
    assert (g.max_tool_result_chars, g.head_chars, g.tail_chars) == (9000, 100, 200)
    error = config_error(tmp_path, "[context_guard]\nreserve_token = 1\n")
    assert error.key == "context_guard.reserve_token"
    assert "did you mean 'reserve_tokens'?" in str(error)
    error = config_error(tmp_path, "[context_guard]\nreserve_tokens = -1\n")
    assert error.key == "context_guard.reserve_tokens"
    assert "must be >= 0, got -1" in str(error)
    error = config_error(tmp_path, '[context_guard]\nenabled = "yes"\n')
    assert error.key == "context_guard.enabled"
    # head + tail checked even when only the maximum is written (the defaults are 2000 each).
    error = config_error(tmp_path, "[context_guard]\nmax_tool_result_chars = 4000\n")
    assert error.key == "context_guard.head_chars"
    assert "(2000 + 2000) must be below" in str(error)
    assert ContextGuardConfig(max_tool_result_chars=4001).tail_chars == 2000


def test_truncation_head_and_tail_must_fit(tmp_path: Path) -> None:
    error = config_error(
        tmp_path, "[tool_result_truncation]\nmax_chars = 100\nhead_chars = 60\ntail_chars = 40\n"
    )
    # The constructor's own check, run when the file loads: one home, one wording.
    assert error.key == "tool_result_truncation.head_chars"
    assert "head_chars + tail_chars (60 + 40) must be below max_chars (100)" in str(error)
    assert TruncationConfig(max_chars=101, head_chars=60, tail_chars=40).max_chars == 101


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    error = config_error(tmp_path, "[compaction]\nmax_failures = 0\ntypo = 1\n[proxy]\nport = -1\n")
    assert error.key == "compaction.max_failures"
    message = str(error)
    assert "2 more problem(s)" in message
    assert "compaction.typo: unknown key" in message
    assert "proxy.port:" in message


# -- placeholder template ------------------------------------------------------------------


def test_custom_placeholder_with_known_fields_is_accepted() -> None:
    template = "[masked {tool_name} #{tool_call_id}: {original_chars:,} chars]"
    assert Schema1Config(placeholder_template=template).placeholder_template == template


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("[masked {tool}]", "unknown field(s) ['tool']"),
        ("[masked {0}]", "unknown field(s) ['0']"),
        ("[masked {tool_name.upper}]", "unknown field(s) ['tool_name.upper']"),
        ("[masked {tool_name]", "invalid placeholder template"),
        ("[masked {original_chars:{tool_name}}]", "cannot be formatted"),
    ],
)
def test_placeholder_with_unknown_fields_is_rejected(
    tmp_path: Path, template: str, expected: str
) -> None:
    text = f"[observation_masking.schema1]\nplaceholder_template = {template!r}\n"
    error = config_error(tmp_path, text)
    assert error.key == "observation_masking.schema1.placeholder_template"
    assert expected in str(error)


# -- the API key ---------------------------------------------------------------------------


def test_api_key_is_read_from_the_environment_at_use_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_KEY_VAR", raising=False)
    llm = LLMConfig(provider="openai", model="m", api_key_env="MY_KEY_VAR")
    assert llm.api_key() is None
    monkeypatch.setenv("MY_KEY_VAR", SECRET)
    assert llm.api_key() == SECRET
    monkeypatch.setenv("MY_KEY_VAR", "")
    assert llm.api_key() is None


def test_api_key_env_defaults_by_provider() -> None:
    assert LLMConfig(provider="openai", model="m").api_key_env == "OPENAI_API_KEY"
    assert LLMConfig(provider="anthropic", model="m").api_key_env == "ANTHROPIC_API_KEY"


def test_the_key_never_appears_in_repr_str_or_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    config = Config.from_dict({"compaction": {"llm": {"provider": "openai", "model": "m"}}})
    assert config.compaction.llm is not None
    assert config.compaction.llm.api_key() == SECRET
    for text in (repr(config), str(config), config.model_dump_json(), repr(config.compaction.llm)):
        assert SECRET not in text


def test_a_key_pasted_into_the_config_is_never_echoed(tmp_path: Path) -> None:
    text = f'[compaction.llm]\nprovider = "openai"\nmodel = "m"\napi_key = "{SECRET}"\n'
    error = config_error(tmp_path, text)
    assert error.key == "compaction.llm.api_key"
    assert "never write an API key in the config file" in str(error)
    assert SECRET not in str(error)
    text = f'[agent.llm]\nprovider = "openai"\nmodel = "m"\napi_key_env = "{SECRET}"\n'
    error = config_error(tmp_path, text)
    assert error.key == "agent.llm.api_key_env"
    assert "not the API key itself" in str(error)
    assert SECRET not in str(error)
    assert error.__cause__ is None
    assert error.__suppress_context__


def test_key_in_llm_fields_is_not_echoed_in_pydantic_errors_either() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        LLMConfig(provider="openai", model="m", api_key_env=SECRET)
    assert SECRET not in str(info.value)


# -- construction in code ----------------------------------------------------------------------


def test_from_dict_rejects_non_tables() -> None:
    with pytest.raises(ConfigError, match="expected a table"):
        Config.from_dict(["compaction"])


def test_from_dict_errors_carry_the_key_without_a_path() -> None:
    with pytest.raises(ConfigError) as info:
        Config.from_dict({"compaction": {"trigger_ratio": 2}})
    assert info.value.path is None
    assert info.value.key == "compaction.trigger_ratio"


def test_params_are_checked_against_the_strategy_when_the_file_loads(tmp_path: Path) -> None:
    text = """
    [compaction]
    strategy = "pipeline"
    [compaction.params]
    steps = ["tool-result-hiding", {strategy = "llm-summary"}]
    """
    config = load_config(write(tmp_path, text))
    assert config.compaction.params == {
        "steps": ["tool-result-hiding", {"strategy": "llm-summary"}],
    }
    error = config_error(
        tmp_path, '[compaction]\nstrategy = "tool-result-hiding"\n[compaction.params]\nkeep = 3\n'
    )
    assert error.key == "compaction.params"
    assert "unknown parameter 'keep'" in str(error)
    assert "preserve_recent_n: int = 5" in str(error)  # the accepted params, with defaults
    # A strategy that cannot be imported here is judged when it is built, naming the spec.
    unknown = '[compaction]\nstrategy = "no_such_pkg.mod:Thing"\n[compaction.params]\nx = 1\n'
    assert load_config(write(tmp_path, unknown)).compaction.params == {"x": 1}


def test_assignment_is_validated() -> None:
    compaction = CompactionConfig(max_context_size=1000, reserved_context_size=10)
    with pytest.raises(pydantic.ValidationError):
        compaction.trigger_ratio = 0.1
    compaction.trigger_ratio = 0.8
    assert compaction.trigger_ratio == 0.8


def test_the_json_schema_builds_and_keeps_every_default() -> None:
    # Editors and docs use it; pytest turns a PydanticJsonSchemaWarning into a failure.
    schema = Config.model_json_schema()
    compaction = schema["$defs"]["CompactionConfig"]["properties"]
    assert compaction["reserved_context_size"]["default"] == 50_000
    assert compaction["strategy"]["default"] == "ctxcompact.strategies:LLMSummary"
