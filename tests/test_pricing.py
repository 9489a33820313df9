"""Provider pricing in replay: write premiums, read prices, minimum prefixes, TTLs, the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ctxcompact import Message, from_anthropic, from_openai
from ctxcompact.cli import main
from ctxcompact.replay import PRICING, CacheMeter, Pricing, message_time, provider, replay
from tests.helpers.traces import TRACES_DIR

SMALL = TRACES_DIR / "taubench-gpt4o-airline__task3_trial0.json"


class CharCounter:
    """One token per character of text."""

    def count(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def count_message(self, message: Message) -> int:
        return len(message.text)


A, B, C = Message.user("a" * 1000), Message.assistant("b" * 500), Message.user("c" * 100)


def test_flat_pricing_bills_exactly_as_the_cached_price_model() -> None:
    plain = CacheMeter(CharCounter(), cached_price=0.1)
    flat = CacheMeter(CharCounter(), pricing=provider("flat", cached_price=0.1))
    for request in ([A], [A, B], [A, B, C], [C]):
        assert plain.bill(request) == flat.bill(request)


def test_anthropic_bills_writes_at_a_premium_and_reads_at_a_tenth() -> None:
    meter = CacheMeter(CharCounter(), pricing=PRICING["anthropic"])
    first = meter.bill([A, B])  # 1500 tokens, nothing cached: all written at 1.25
    assert (first.cached_tokens, first.cache_write_tokens) == (0, 1500)
    assert first.cost == pytest.approx(1500 * 1.25)
    second = meter.bill([A, B, C])
    assert (second.cached_tokens, second.cache_write_tokens) == (1500, 100)
    assert second.cost == pytest.approx(1500 * 0.1 + 100 * 1.25)


def test_a_prefix_below_the_minimum_is_not_cached() -> None:
    meter = CacheMeter(CharCounter(), pricing=PRICING["openai-gpt-4o"])
    short = Message.user("s" * 1000)  # below OpenAI's 1,024-token minimum
    meter.bill([short])
    bill = meter.bill([short, C])
    assert bill.cached_tokens == 0
    assert bill.cost == 1100
    meter.bill([A, B])
    assert meter.bill([A, B, C]).cost == pytest.approx(1500 * 0.5 + 100)


def test_calls_further_apart_than_the_ttl_read_no_cache() -> None:
    meter = CacheMeter(CharCounter(), pricing=PRICING["anthropic"])
    meter.bill([A, B], at=1000.0)
    warm = meter.bill([A, B, C], at=1000.0 + 299)
    assert warm.cached_tokens == 1500
    assert not warm.expired
    cold = meter.bill([A, B, C, B], at=1299.0 + 301)
    assert cold.expired
    assert cold.cached_tokens == 0
    assert not cold.cache_break  # nothing the strategy did: the prefix was kept
    assert cold.cost == pytest.approx(2100 * 1.25)


def test_flat_pricing_never_expires() -> None:
    meter = CacheMeter(CharCounter(), cached_price=0.1)
    meter.bill([A], at=0.0)
    assert meter.bill([A, C], at=10.0**6).cached_tokens == 1000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-01-01T00:00:05Z", 1735689605.0),
        ("2025-01-01T00:00:05.500+00:00", 1735689605.5),
        (1735689605, 1735689605.0),
        (1735689605500, 1735689605.5),  # milliseconds
        ("yesterday", None),
        (True, None),
    ],
)
def test_message_time_reads_the_timestamp_extra(value: object, expected: float | None) -> None:
    (message,) = from_openai([{"role": "assistant", "content": "x", "timestamp": value}])
    assert message_time(message) == expected


def test_message_time_reads_the_anthropic_layout_and_none_without() -> None:
    (message,) = from_anthropic(
        [{"role": "assistant", "content": "x", "timestamp": "2025-01-01T00:00:05Z"}]
    )
    assert message_time(message) == 1735689605.0
    assert message_time(Message.assistant("x")) is None


def test_provider_names_the_valid_tables_and_takes_extra_ones() -> None:
    with pytest.raises(KeyError, match="anthropic-1h"):
        provider("nope")
    mine = Pricing("mine", read=0.2, write=1.5, ttl_seconds=60)
    assert provider("mine", extra={"mine": mine}) is mine
    assert provider("flat", cached_price=0.3).read == 0.3
    assert provider("anthropic", cached_price=0.3).read == 0.1  # only flat follows it


def test_bad_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="read"):
        Pricing("x", read=1.5)
    with pytest.raises(ValueError, match="write"):
        Pricing("x", read=0.1, write=0.5)
    with pytest.raises(ValueError, match="ttl_seconds"):
        Pricing("x", read=0.1, ttl_seconds=0)


async def test_replay_counts_reads_writes_and_expired_calls_from_timestamps() -> None:
    raw: list[dict[str, Any]] = [
        {"role": "user", "content": "q" * 2000},
        {"role": "assistant", "content": "a", "timestamp": 0},
        {"role": "user", "content": "r" * 10},
        {"role": "assistant", "content": "b", "timestamp": 60},
        {"role": "user", "content": "s" * 10},
        {"role": "assistant", "content": "c", "timestamp": 60 + 3600},  # an hour idle
    ]
    conversation = from_openai(raw)
    stats = await replay(conversation, None, counter=CharCounter(), pricing=PRICING["anthropic"])
    assert stats.calls == 3
    assert stats.expired_calls == 1
    assert stats.cache_read_tokens + stats.cache_write_tokens == stats.input_tokens
    assert stats.cache_read_tokens == 2000  # only the second call read the cache
    flat = await replay(conversation, None, counter=CharCounter())
    assert flat.expired_calls == 0
    assert flat.cache_read_tokens == 2000 + 2011
    assert stats.cost > flat.cost


def test_cli_json_reports_the_pricing_and_cache_reads_and_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", str(SMALL), "--pricing", "anthropic", "--json", "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["settings"]["pricing"] == {
        "name": "anthropic", "read": 0.1, "write": 1.25, "ttl_seconds": 300.0, "min_tokens": 1024
    }  # fmt: skip
    base = doc["total"]["baseline"]
    assert base["cache_read_tokens"] + base["cache_write_tokens"] == base["input_tokens"]
    assert base["cache_read_tokens"] > 0


def test_cli_text_report_names_the_provider_priced_cost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", str(SMALL), "--pricing", "anthropic", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "pricing anthropic: cache reads 0.1, writes 1.25, TTL 300 s" in out
    assert "cost (anthropic)" in out
    assert "cache writes (tokens)" in out


def test_cli_takes_a_pricing_table_from_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        "[compaction]\nstrategy = 'tool-result-hiding'\nmax_context_size = 16000\n"
        "reserved_context_size = 4000\n[pricing.gateway]\nread = 0.2\nwrite = 1.5\n",
        encoding="utf-8",
    )
    args = ["replay", str(SMALL), "--config", str(config), "--pricing", "gateway", "--json"]
    assert main([*args, "--no-progress"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["settings"]["pricing"]["name"] == "gateway"
    assert doc["settings"]["pricing"]["write"] == 1.5


def test_cli_unknown_pricing_is_an_error_listing_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["replay", str(SMALL), "--pricing", "cheap", "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "cheap" in err
    assert "openai-gpt-4o" in err
