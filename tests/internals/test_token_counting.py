"""The heuristic counter's text counting against its first, character-by-character version,
its per-text cache, and the ``[token_counting]`` builder.

White-box: the reference counts with the private per-script weight table (``_char_weight``),
the cache checks read the private ``lru_cache`` behind ``count_text``, and
``counter_from_config`` is the composition root's helper, not an API.
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcompact import HeuristicTokenCounter, TiktokenCounter
from ctxcompact._tokens import counters as _tokens
from ctxcompact._tokens.counters import _char_weight, counter_from_config
from ctxcompact.exceptions import ConfigError
from tests.helpers.traces import load_trace, trace_names


def slow_count_text(text: str, chars_per_token: float) -> int:
    """The first, character-by-character version of ``count_text``: the reference."""
    if text.isascii():
        return math.ceil(len(text) / chars_per_token)
    others = re.sub(r"[\x00-\x7f]+", "", text)
    weight = sum(_char_weight(ord(ch)) for ch in others)
    return math.ceil((len(text) - len(others)) / chars_per_token + weight)


# Every code point, lone surrogates included (JSON can carry them), biased towards ASCII and
# the scripts whose weights differ, so runs and mixtures are common.
_CHARS = st.one_of(
    st.characters(min_codepoint=0, max_codepoint=0x7F),
    st.characters(min_codepoint=0x80, max_codepoint=0x3000),
    st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None),
    st.sampled_from("→─│中文é😀✓\ud800\udfff"),
)


@settings(max_examples=400, deadline=None)
@given(text=st.text(_CHARS, max_size=300), cpt=st.sampled_from([3.25, 4.0, 1.0, 2.7]))
def test_count_text_equals_the_slow_reference(text: str, cpt: float) -> None:
    counter = HeuristicTokenCounter(chars_per_token=cpt)
    assert counter.count_text(text) == slow_count_text(text, cpt)


def test_count_text_equals_the_slow_reference_on_every_trace_text() -> None:
    counter = HeuristicTokenCounter()
    texts = 0
    for name in trace_names():
        for message in load_trace(name):
            for key in ("content", "reasoning_content"):
                text = message.get(key)
                if isinstance(text, str) and not text.isascii():
                    texts += 1
                    assert counter.count_text(text) == slow_count_text(text, 3.25), name
    assert texts > 100


def test_cached_weights_serve_every_ratio_and_the_longest_texts_are_not_kept() -> None:
    _tokens._non_ascii_cached.cache_clear()
    text = "→ a.py\n" * 100
    longest = "中" * (_tokens._CACHED_CHARS + 1)
    for cpt in (3.25, 4.0, 3.25):  # the second 3.25 is counted from the cache
        counter = HeuristicTokenCounter(chars_per_token=cpt)
        assert counter.count_text(text) == slow_count_text(text, cpt)
        assert counter.count_text(longest) == slow_count_text(longest, cpt)
    info = _tokens._non_ascii_cached.cache_info()
    assert (info.currsize, info.hits, info.maxsize) == (1, 2, 512)  # never the longest
    # Equal strings that are other objects (every proxied request is parsed anew) hit too.
    HeuristicTokenCounter().count_text(text.encode().decode())
    assert _tokens._non_ascii_cached.cache_info().hits == 3


class _Settings:
    def __init__(self, method: str, encoding: str = "cl100k_base") -> None:
        self.method = method
        self.encoding = encoding


def test_counter_from_config() -> None:
    assert isinstance(counter_from_config(None), HeuristicTokenCounter)
    assert isinstance(counter_from_config(_Settings("heuristic")), HeuristicTokenCounter)
    tik = counter_from_config(_Settings("tiktoken"))
    assert isinstance(tik, TiktokenCounter)
    assert tik.encoding == "cl100k_base"
    with pytest.raises(ConfigError, match=r"token_counting\.method"):
        counter_from_config(_Settings("words"))


def test_counter_from_a_real_config_object() -> None:
    from ctxcompact import Config

    config = Config.model_validate(
        {"compaction": {"max_context_size": 100_000}, "token_counting": {"method": "tiktoken"}}
    )
    assert isinstance(counter_from_config(config.token_counting), TiktokenCounter)
