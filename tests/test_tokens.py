from __future__ import annotations

import subprocess
import sys

import pytest

from ctxcompact import (
    IMAGE_TOKENS,
    PER_MESSAGE_TOKENS,
    HeuristicTokenCounter,
    Message,
    TiktokenCounter,
    TokenCounter,
    from_openai,
)
from ctxcompact.exceptions import ConfigError, MissingDependencyError
from tests.helpers.gen import assistant, call, tool, user
from tests.helpers.traces import load_trace, trace_names

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 40_000}}
SAMPLES = {
    "chinese": "我们希望用最少的代码与抽象把压缩从单一固定策略升级为可配置、可替换、可扩展的机制，"
    "从而支持快速试错。触发时机由控制器决定，策略不负责何时运行。",
    "japanese": "これは日本語のテキストです。トークンの数を数えるためのサンプルとして使います。",
    "korean": "안녕하세요. 이것은 토큰 수를 세기 위한 한국어 샘플 텍스트입니다.",
    "hebrew": "זוהי דוגמה לטקסט בעברית לספירת מספר האסימונים.",
    "greek": "Αυτό είναι ένα παράδειγμα ελληνικού κειμένου για μέτρηση.",
    "hindi": "यह मॉडल में टोकन की संख्या गिनने के लिए हिंदी पाठ का एक उदाहरण है।",
    "emoji": "🚀🐛📋✅❌🎉👍🔥",
    "french": "Éléments déjà créés: à côté, où, être, naïve, français, garçon.",
}


@pytest.fixture(scope="module")
def tiktoken_counter() -> TiktokenCounter:
    return TiktokenCounter()


def test_both_counters_satisfy_the_protocol(tiktoken_counter: TiktokenCounter) -> None:
    assert isinstance(HeuristicTokenCounter(), TokenCounter)
    assert isinstance(tiktoken_counter, TokenCounter)


def test_tiktoken_counter_works_offline_with_cl100k(tiktoken_counter: TiktokenCounter) -> None:
    # "hello world" is 2 cl100k tokens; plus the per-message overhead.
    assert tiktoken_counter.count_text("hello world") == 2
    assert tiktoken_counter.count([user("hello world")]) == 2 + PER_MESSAGE_TOKENS
    # special-token text in a message is plain text, not an error
    assert tiktoken_counter.count_text("<|endoftext|>") > 1


def test_tiktoken_counter_unknown_encoding_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"no_such_encoding.*cl100k_base"):
        TiktokenCounter("no_such_encoding")


def test_empty_message_costs_the_overhead_only(tiktoken_counter: TiktokenCounter) -> None:
    for counter in (HeuristicTokenCounter(), tiktoken_counter):
        assert counter.count_message(Message(role="assistant")) == PER_MESSAGE_TOKENS
        assert counter.count([]) == 0


def test_tool_call_names_and_arguments_are_counted() -> None:
    counter = HeuristicTokenCounter()
    bare = assistant(None, call("c1", "x", "{}"))
    big = assistant(None, call("c1", "read_file_with_a_long_name", '{"path": "' + "a" * 300 + '"}'))
    assert counter.count_message(big) - counter.count_message(bare) >= 300 / 3.25
    two = assistant(None, call("a", "x", "{}"), call("b", "x", "{}"))
    assert counter.count_message(two) > counter.count_message(bare)


def test_images_cost_the_documented_amount_not_their_payload() -> None:
    counter = HeuristicTokenCounter()
    text_only = user([{"type": "text", "text": "look"}])
    with_image = user([{"type": "text", "text": "look"}, IMAGE])
    assert counter.count_message(with_image) - counter.count_message(text_only) == IMAGE_TOKENS
    assert HeuristicTokenCounter(image_tokens=85).count_message(with_image) == (
        counter.count_message(text_only) + 85
    )


def test_raw_parts_are_counted_by_their_json() -> None:
    counter = HeuristicTokenCounter()
    thinking = {"type": "thinking", "thinking": "t" * 650, "signature": "s"}
    msg = Message.assistant([thinking])
    assert counter.count_message(msg) >= PER_MESSAGE_TOKENS + 650 / 3.25


def test_reasoning_content_and_name_are_counted() -> None:
    counter = HeuristicTokenCounter()
    plain = assistant("ok")
    assert counter.count_message(assistant("ok", reasoning_content="r" * 325)) >= (
        counter.count_message(plain) + 100
    )
    named = Message(role="tool", tool_call_id="a", content="x", name="n" * 65)
    assert counter.count_message(named) >= counter.count_message(tool("a", "x")) + 20


def test_reasoning_content_of_a_trace_is_counted() -> None:
    raw = load_trace("claudecode__258c7280__precompact")
    i, message = next(
        (i, m) for i, m in enumerate(raw) if m["role"] == "assistant" and m.get("reasoning_content")
    )
    counter = HeuristicTokenCounter()
    with_reasoning = counter.count_message(from_openai([message])[0])
    without = counter.count_message(
        from_openai([{k: v for k, v in message.items() if k != "reasoning_content"}])[0]
    )
    assert with_reasoning - without == counter.count_text(message["reasoning_content"]) > 0, i


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_non_ascii_text_is_not_undercounted(name: str, tiktoken_counter: TiktokenCounter) -> None:
    text = SAMPLES[name]
    assert HeuristicTokenCounter().count_text(text) >= tiktoken_counter.count_text(text)


def test_cjk_costs_at_least_one_token_per_character() -> None:
    text = SAMPLES["chinese"]
    assert HeuristicTokenCounter().count_text(text) >= len(text)


@pytest.mark.parametrize("name", trace_names())
def test_heuristic_overcounts_each_trace_slightly(
    name: str, tiktoken_counter: TiktokenCounter
) -> None:
    history = from_openai(load_trace(name))
    exact = tiktoken_counter.count(history)
    estimate = HeuristicTokenCounter().count(history)
    # Calibration: never under cl100k on a public trace, and not wildly over.
    assert exact <= estimate <= exact * 1.35


def test_count_is_the_sum_of_count_message() -> None:
    history = from_openai(load_trace(trace_names()[0]))
    counter = HeuristicTokenCounter()
    assert counter.count(history) == sum(counter.count_message(m) for m in history)


def test_bad_chars_per_token_is_rejected() -> None:
    with pytest.raises(ValueError, match="chars_per_token"):
        HeuristicTokenCounter(chars_per_token=0)


def test_missing_tiktoken_names_the_extra() -> None:
    # A fresh interpreter where importing tiktoken fails exactly as when it is not installed
    # (a None entry in sys.modules makes `import tiktoken` raise ImportError).
    code = (
        "import sys; sys.modules['tiktoken'] = None\n"
        "from ctxcompact import TiktokenCounter\n"
        "from ctxcompact.exceptions import MissingDependencyError\n"
        "try:\n    TiktokenCounter()\n"
        "except MissingDependencyError as e:\n    print(type(e).__name__, e.extra, e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == (
        "MissingDependencyError tiktoken TiktokenCounter needs the optional dependency "
        "'tiktoken': pip install 'ctxcompact[tiktoken]'"
    )
    assert issubclass(MissingDependencyError, ImportError)
