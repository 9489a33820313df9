"""Message builders and hypothesis strategies shared by the test suite.

Builders keep hand-written cases short::

    h = [system("be brief"), user("hi"), assistant(None, call("a"), call("b")),
         tool("a", "ok"), tool("b", "ok"), assistant("done")]

``valid_histories()`` generates histories that ``check_history`` must accept: an optional
leading system message, user/assistant turns, assistant messages with 1..N parallel tool calls
answered right after (results in any order), ids re-used across turns (never inside one
message), list content (text, image, raw parts) on user and tool messages, error-looking tool
results, unknown extra fields, and optionally a final assistant whose calls are still pending.

``invalid_histories()`` generates ``(history, kind)`` pairs: a valid history with one defect
injected, ``kind`` being the ``HistoryProblem.kind`` the validator must report for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from ctxcompact import ImagePart, Message, RawPart, TextPart, ToolCall

__all__ = [
    "PROBLEM_KINDS",
    "assistant",
    "call",
    "invalid_histories",
    "system",
    "tool",
    "user",
    "valid_histories",
]

PROBLEM_KINDS = (
    "orphan_result",
    "unanswered_call",
    "separated_result",
    "duplicate_call_id",
    "misplaced_tool_calls",
    "misplaced_tool_call_id",
)

# -- builders -------------------------------------------------------------------------------


def call(id: str, name: str = "bash", args: str = "{}") -> ToolCall:
    """A tool call (``args`` is the raw JSON text)."""
    return ToolCall(id=id, name=name, arguments=args)


def user(text: str | Sequence[Any]) -> Message:
    """A user message; ``text`` may be a string or a list of parts/dicts."""
    return Message.user(text)


def assistant(text: str | None, *calls: ToolCall, **extra: Any) -> Message:
    """An assistant message, with tool calls when ``calls`` are given; ``extra`` keys kept."""
    msg = Message.assistant(text, tool_calls=calls if calls else None)
    return msg.model_copy(update=extra) if extra else msg


def tool(id: str, content: str | Sequence[Any] = "ok", **extra: Any) -> Message:
    """A tool result answering ``id``; ``extra`` keys (``is_error``...) kept."""
    msg = Message.tool(id, content)
    return msg.model_copy(update=extra) if extra else msg


def system(text: str) -> Message:
    """A system message."""
    return Message.system(text)


# -- strategies -----------------------------------------------------------------------------

_WORDS = st.sampled_from(
    ["ok", "hello", "run the tests", "ls -la", "def f(x):\n    return x", "数据", "é à ü", ""]
)
_TEXT = st.lists(_WORDS, min_size=0, max_size=4).map(" ".join)
_NAMES = st.sampled_from(["bash", "read_file", "write_file", "search", "get_user"])
_ARGS = st.sampled_from(["{}", '{"cmd": "ls"}', '{"path": "a.py", "n": 3}', "not json", ""])
_ERRORS = st.sampled_from(
    [
        "Error: file not found",
        "Traceback (most recent call last):\n  File 'x.py'\nValueError: bad",
        "<returncode>1</returncode>\n<output>fail</output>",
        "<tool_use_error>denied</tool_use_error>",
    ]
)


def _parts(text: st.SearchStrategy[str]) -> st.SearchStrategy[tuple[Any, ...]]:
    part = st.one_of(
        text.map(lambda t: TextPart(text=t)),
        text.map(
            lambda t: TextPart.model_validate(
                {"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}
            )
        ),
        st.just(
            ImagePart.model_validate(
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
            )
        ),
        st.just(
            RawPart.model_validate(
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
            )
        ),
    )
    return st.lists(part, min_size=1, max_size=3).map(tuple)


def _content(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.one_of(text, _parts(text))


@st.composite
def _group(
    draw: st.DrawFn, *, max_calls: int, id_pool: int, answered: bool = True
) -> list[Message]:
    """An assistant message with 1..max_calls calls and, when ``answered``, their results."""
    n = draw(st.integers(1, max_calls))
    # A small pool makes ids repeat across turns (tau-bench does this), unique within a message.
    ids = draw(st.lists(st.integers(0, max(id_pool, n) - 1), min_size=n, max_size=n, unique=True))
    calls = [call(f"call_{i}", draw(_NAMES), draw(_ARGS)) for i in ids]
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra["reasoning_content"] = draw(_TEXT)
    head = assistant(draw(st.one_of(st.none(), _TEXT)), *calls, **extra)
    if not answered:
        return [head]
    order = draw(st.permutations(range(n)))
    results = []
    for k in order:
        kind = draw(st.sampled_from(["text", "parts", "error", "flagged"]))
        if kind == "text":
            results.append(tool(calls[k].id, draw(_TEXT)))
        elif kind == "parts":
            results.append(tool(calls[k].id, draw(_parts(_TEXT))))
        elif kind == "error":
            results.append(tool(calls[k].id, draw(_ERRORS)))
        else:
            results.append(tool(calls[k].id, draw(_ERRORS), is_error=True))
    return [head, *results]


@st.composite
def _blocks(
    draw: st.DrawFn,
    *,
    max_turns: int,
    max_steps: int,
    max_calls: int,
    id_pool: int,
    pending: bool | None,
) -> list[list[Message]]:
    """A valid history as a list of blocks; a defect may be inserted between two blocks."""
    blocks: list[list[Message]] = []
    if draw(st.booleans()):
        blocks.append([system(draw(_TEXT))])
    for _ in range(draw(st.integers(1, max_turns))):
        blocks.append([user(draw(_content(_TEXT)))])
        for _ in range(draw(st.integers(0, max_steps))):
            blocks.append(draw(_group(max_calls=max_calls, id_pool=id_pool)))
        if draw(st.booleans()):
            blocks.append(
                [assistant(draw(_TEXT), **({"refusal": None} if draw(st.booleans()) else {}))]
            )
    with_pending = draw(st.booleans()) if pending is None else pending
    if with_pending:
        blocks.append(draw(_group(max_calls=max_calls, id_pool=id_pool, answered=False)))
    return blocks


def valid_histories(
    *,
    max_turns: int = 3,
    max_steps: int = 3,
    max_calls: int = 3,
    id_pool: int = 4,
    pending: bool | None = None,
) -> st.SearchStrategy[list[Message]]:
    """Histories ``check_history`` accepts. Raise the ``max_*`` sizes for bigger ones.

    Args:
        max_turns: User turns (at least one).
        max_steps: Tool-call steps per turn.
        max_calls: Parallel calls per assistant message.
        id_pool: Distinct ids to draw from (small = more re-use across turns).
        pending: Force (True) or forbid (False) a final assistant with unanswered calls;
            None lets hypothesis choose.
    """
    return _blocks(
        max_turns=max_turns,
        max_steps=max_steps,
        max_calls=max_calls,
        id_pool=id_pool,
        pending=pending,
    ).map(lambda blocks: [m for b in blocks for m in b])


# -- invalid histories: one injected defect each ---------------------------------------------

_Inject = Callable[[st.DrawFn, list[list[Message]]], list[list[Message]]]


def _insert_block(draw: st.DrawFn, blocks: list[list[Message]], new: list[Message]) -> None:
    # Never after a trailing pending group: that would also make its calls unanswered.
    last = len(blocks)
    if blocks and blocks[-1][-1].tool_calls:
        last -= 1
    blocks.insert(draw(st.integers(0, last)), new)


def _orphan(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    # An id never used by any call; may land anywhere, even inside a tool run.
    flat_len = sum(len(b) for b in blocks)
    pos = draw(st.integers(0, flat_len))
    flat = [m for b in blocks for m in b]
    flat.insert(pos, tool("orphan_id", draw(_TEXT)))
    return [flat]


def _unanswered(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    new = [assistant(None, call("never_answered")), user(draw(_TEXT))]
    _insert_block(draw, blocks, new)
    return blocks


def _separated(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    group = draw(_group(max_calls=3, id_pool=4))
    cut = draw(st.integers(1, len(group) - 1))  # before at least one result
    intruder = draw(st.sampled_from([user("wait"), system("note"), assistant("hmm")]))
    _insert_block(draw, blocks, [*group[:cut], intruder, *group[cut:]])
    return blocks


def _duplicate(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    new = [assistant(None, call("dup"), call("dup")), tool("dup", "a"), tool("dup", "b")]
    _insert_block(draw, blocks, new)
    return blocks


def _misplaced_calls(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    role = draw(st.sampled_from(["user", "system", "developer"]))
    bad = Message(role=role, content="x", tool_calls=(call("stray"),))
    _insert_block(draw, blocks, [bad])
    return blocks


def _misplaced_id(draw: st.DrawFn, blocks: list[list[Message]]) -> list[list[Message]]:
    role = draw(st.sampled_from(["user", "system", "assistant"]))
    bad = Message(role=role, content="x", tool_call_id="stray")
    _insert_block(draw, blocks, [bad])
    return blocks


_INJECTORS: dict[str, _Inject] = {
    "orphan_result": _orphan,
    "unanswered_call": _unanswered,
    "separated_result": _separated,
    "duplicate_call_id": _duplicate,
    "misplaced_tool_calls": _misplaced_calls,
    "misplaced_tool_call_id": _misplaced_id,
}
assert set(_INJECTORS) == set(PROBLEM_KINDS)


def invalid_histories(
    kinds: Sequence[str] = PROBLEM_KINDS,
    *,
    max_turns: int = 3,
    max_steps: int = 2,
    max_calls: int = 3,
) -> st.SearchStrategy[tuple[list[Message], str]]:
    """``(history, kind)``: a valid history with one defect of ``kind`` injected.

    The validator must report at least one problem of ``kind``; ids used by the injected
    defects (``orphan_id``, ``never_answered``, ``dup``, ``stray``) never occur in the valid
    part, so the defect cannot be paired away.
    """

    @st.composite
    def build(draw: st.DrawFn) -> tuple[list[Message], str]:
        kind = draw(st.sampled_from(list(kinds)))
        blocks = draw(
            _blocks(
                max_turns=max_turns,
                max_steps=max_steps,
                max_calls=max_calls,
                id_pool=4,
                pending=None,
            )
        )
        blocks = _INJECTORS[kind](draw, blocks)
        return [m for b in blocks for m in b], kind

    return build()
