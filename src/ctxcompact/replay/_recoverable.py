"""Does what a strategy removed really come back? Checked the way a model would get it back.

A removal is *recoverable* at a model call when both hold:

1. the input of that call names its handle: in a recall marker (``recall_tool_result("h")``),
   in a drop note's list of results, or in the list a range handle named in the input
   recalls to (followed through the earlier ranges each lists);
2. recalling that handle through the executor (:func:`~ctxcompact.store.recall_whole`, which
   pages through :func:`~ctxcompact.store.execute_recall`'s answers) returns the original
   text, byte for byte: a result's text, a call's arguments, a message's text.

Nothing asks the store whether it holds an id: what is counted is what the model can read.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..kit import DROP_NOTE_RE, RANGE_PREFIX
from ..store._recall import recall_whole
from ..store._records import DEFAULT_NAMESPACE
from ..store._removed import Handles, text_digest

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .._history.messages import Message
    from ..store._records import OriginalsStore
    from ..store._removed import Removal

__all__ = ["RecallCheck"]

# A marker inside a call's JSON arguments has its quotes escaped.
_QUOTED = re.compile(r'recall_tool_result\(\\?"([^"\\\n]{1,300})\\?"')
_RESULTS = re.compile(r"; results: ([^\]\n]*)\]")
_RANGE_ROW = re.compile(r"^(\S+) (?:result of |\w+, \d+ chars)", re.MULTILINE)
_CALLS = re.compile(r"\(calls: ([^)\n]*)\)")
_EARLIER = re.compile(r"^earlier removals: (.*)$", re.MULTILINE)


class RecallCheck:
    """Checks that removals come back through the recall executor, as a model would recall.

    Args:
        store: The store the controller kept the originals in.
        namespace: Whose originals they are.

    Example:
        >>> from ctxcompact import CompactionController, Message
        >>> from ctxcompact.store import DEFAULT_RECALL_TEMPLATE, removed_originals
        >>> from ctxcompact.testing import FunctionStrategy
        >>> drop_middle = FunctionStrategy(lambda ctx: [ctx.history[0], ctx.history[-1]])
        >>> controller = CompactionController(drop_middle, max_context_size=10,
        ...     reserved_context_size=0, recall_placeholder=DEFAULT_RECALL_TEMPLATE)
        >>> history = [Message.user("task"), Message.assistant("x" * 60), Message.user("go")]
        >>> import asyncio
        >>> view = asyncio.run(controller.compact(history)).history
        >>> check = RecallCheck(controller.store)
        >>> [check.comes_back(r, view) for r in removed_originals(history, view)]
        [True]
    """

    def __init__(self, store: OriginalsStore, *, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.store = store
        self.namespace = namespace
        self._ranges: dict[str, tuple[set[str], set[str]]] = {}
        self._views: dict[int, tuple[Sequence[Message], frozenset[str]]] = {}
        self._back: dict[tuple[str, str], bool] = {}

    def named(self, view: Sequence[Message]) -> frozenset[str]:
        """Every handle ``view`` names, directly or through the ranges it names."""
        hit = self._views.get(id(view))
        if hit is not None and hit[0] is view:
            return hit[1]
        found: set[str] = set()
        for message in view:
            texts = [message.text, *(c.arguments for c in message.tool_calls or ())]
            for text in texts:
                if "recall_tool_result" in text:
                    found.update(_QUOTED.findall(text))
                    found.update(_listed(text))
        pending = [h for h in found if h.startswith(RANGE_PREFIX)]
        seen: set[str] = set()
        while pending:
            handle = pending.pop()
            if handle in seen:
                continue
            seen.add(handle)
            members, earlier = self._range(handle)
            found |= members
            found |= earlier
            pending.extend(earlier - seen)
        named = frozenset(found)
        self._views[id(view)] = (view, named)
        return named

    def _range(self, handle: str) -> tuple[set[str], set[str]]:
        hit = self._ranges.get(handle)
        if hit is not None:
            return hit
        text = recall_whole(self.store, handle, namespace=self.namespace) or ""
        members = set(_RANGE_ROW.findall(text))
        for calls in _CALLS.findall(text):
            members.update(part.rsplit(" ", 1)[-1] for part in calls.split(", "))
        earlier = {h for line in _EARLIER.findall(text) for h in line.split()}
        self._ranges[handle] = (members, earlier)
        return members, earlier

    @staticmethod
    def handles_of(removal: Removal) -> tuple[str, ...]:
        """The handles a marker may name for ``removal``: its own, and for a tool result
        or a call both the plain id and the ``id@hash`` form."""
        message = removal.message
        if removal.call is not None:
            call = removal.call
            digest = text_digest("arguments", call.arguments)
            return (f"args:{call.id}", f"args:{call.id}@{digest[:8]}")
        if message.role == "tool" and message.tool_call_id is not None:
            digest = text_digest("tool", message.text)
            return (message.tool_call_id, f"{message.tool_call_id}@{digest[:8]}")
        return (Handles(()).message(message),)

    def comes_back(self, removal: Removal, view: Sequence[Message]) -> bool:
        """Whether ``view`` names a handle of ``removal`` whose recall returns the original,
        byte for byte."""
        named = self.named(view)
        original = removal.original
        for handle in self.handles_of(removal):
            if handle not in named:
                continue
            key = (handle, original)
            if key not in self._back:
                got = recall_whole(self.store, handle, namespace=self.namespace)
                self._back[key] = got == original
            if self._back[key]:
                return True
        return False

    def lost(self, removals: Iterable[Removal], view: Sequence[Message]) -> list[Removal]:
        """The removals of ``removals`` that do not come back from ``view``."""
        return [r for r in removals if not self.comes_back(r, view)]


def _listed(text: str) -> set[str]:
    """The handles the "results:" list of the drop note at the end of ``text`` names."""
    note = DROP_NOTE_RE.search(text)
    if note is None:
        return set()
    out: set[str] = set()
    for listing in _RESULTS.findall(note.group(0)):
        for group in listing.split(", "):
            out.update(group.split(" ")[1:])
    return out
