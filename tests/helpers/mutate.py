"""Mutations of real conversations, for fuzzing the format readers.

Each mutant is a short window of real items or messages with one to three changes made at a
random place inside them (any depth): a key deleted, a value replaced by a value of another
JSON type (or of a near-miss type: a list for an object, a number for a string), a ``type``
or ``role`` swapped for another known one, an element inserted in or dropped from a list.
Seeded, so a failure is reproducible by its number.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

ODD_VALUES: tuple[Any, ...] = (
    None,
    0,
    -1,
    1.5,
    True,
    False,
    "",
    "x",
    [],
    [None],
    ["x"],
    [{"type": "input_text", "text": 3}],
    {},
    {"type": None},
    {"type": "text"},
    {"type": "input_text", "text": ["x"]},
    {"text": "x"},
    {"type": 7, "text": "x"},
    "\ud800",
)
"""Values that are valid JSON and wrong almost anywhere."""

KNOWN_NAMES = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "compaction",
    "item_reference",
    "web_search_call",
    "input_text",
    "output_text",
    "input_image",
    "image_url",
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "function",
)
"""Type and role names, so a mutation can turn one known item into another known kind."""


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for k, child in enumerate(value):
            yield from _paths(child, (*path, k))


def _get(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        root = root[step]
    return root


def _mutate_once(root: list[Any], rng: random.Random) -> None:
    paths = [p for p in _paths(root) if p]
    if not paths:
        root.append(rng.choice(ODD_VALUES))
        return
    path = rng.choice(paths)
    parent, key = _get(root, path[:-1]), path[-1]
    value = parent[key]
    roll = rng.random()
    if roll < 0.25 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.35 and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(rng.choice(ODD_VALUES)))
    elif roll < 0.45 and isinstance(parent, list):
        del parent[key]
    elif roll < 0.6 and isinstance(value, str) and key in ("type", "role"):
        parent[key] = rng.choice(KNOWN_NAMES)
    elif roll < 0.7 and isinstance(value, dict):
        value[rng.choice(("type", "role", "text", "content", "call_id", "id"))] = copy.deepcopy(
            rng.choice(ODD_VALUES)
        )
    else:
        parent[key] = copy.deepcopy(rng.choice(ODD_VALUES))


def mutants(
    corpus: Sequence[Sequence[Any]], count: int, *, seed: int = 18, window: int = 6
) -> Iterator[tuple[int, list[Any]]]:
    """``count`` mutants ``(number, items)`` of windows of ``corpus``'s conversations."""
    rng = random.Random(seed)
    for number in range(count):
        conversation = rng.choice(corpus)
        start = rng.randrange(max(1, len(conversation) - window + 1))
        items = json.loads(json.dumps(list(conversation[start : start + window])))
        for _ in range(rng.randint(1, 3)):
            _mutate_once(items, rng)
        yield number, items
