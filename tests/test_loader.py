"""load_strategy / list_strategies with real modules written to a temporary directory."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxcompact import LLM, CompactionContext, Completion, Message, list_strategies, load_strategy
from ctxcompact.exceptions import StrategyLoadError

WriteModule = Callable[[str, str], None]

_COMPACT = """
    async def compact(self, ctx):
        return None
"""
# The same method, indented for a class body inside the tests' triple-quoted sources.
_BODY = textwrap.indent(textwrap.dedent(_COMPACT), " " * 12)


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write ``name.py`` (or a package path ``pkg/mod.py``) on a fresh sys.path entry."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def write(name: str, source: str) -> None:
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if parent != Path("."):
                (tmp_path / parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()

    yield write
    for name in set(sys.modules) - before:
        del sys.modules[name]


def load_error(spec: str, **kwargs: object) -> str:
    with pytest.raises(StrategyLoadError) as info:
        load_strategy(spec, **kwargs)  # type: ignore[arg-type]
    assert info.value.spec == spec
    assert repr(spec) in str(info.value)
    return str(info.value)


class FakeLLM:
    """Satisfies the LLM Protocol structurally, without subclassing it."""

    async def complete(
        self, messages: object, *, system: object = None, tools: object = None, max_tokens=None
    ) -> Completion:
        return Completion(Message.assistant("summary"))


# -- happy paths -----------------------------------------------------------------------


async def test_plain_class_without_init_loads_and_compacts(write_module: WriteModule) -> None:
    write_module("plain_mod", "class Plain:" + _COMPACT)
    strategy = load_strategy("plain_mod:Plain")
    assert type(strategy).__name__ == "Plain"
    ctx = CompactionContext([Message.user("hi")], 10, 100, 10)
    assert await strategy.compact(ctx) is None


def test_class_in_a_package_and_a_nested_class(write_module: WriteModule) -> None:
    write_module(
        "pkg_a.sub.strat",
        "class Outer:\n    class Inner:" + _COMPACT.replace("\n    ", "\n        "),
    )
    strategy = load_strategy("pkg_a.sub.strat:Outer.Inner")
    assert type(strategy).__qualname__ == "Outer.Inner"


def test_keyword_only_params_are_validated_and_passed(write_module: WriteModule) -> None:
    write_module(
        "kw_mod",
        """
        from __future__ import annotations

        class Kw:
            def __init__(self, *, keep: int = 5, label: str = "x", ratio: float = 0.5) -> None:
                self.keep, self.label, self.ratio = keep, label, ratio
        """
        + _BODY,
    )
    strategy = load_strategy("kw_mod:Kw", params={"keep": 2, "ratio": 1})
    assert (strategy.keep, strategy.label, strategy.ratio) == (2, "x", 1.0)  # type: ignore[attr-defined]
    assert isinstance(strategy.ratio, float)  # type: ignore[attr-defined]


def test_future_annotations_resolve_for_injection(write_module: WriteModule) -> None:
    write_module(
        "future_mod",
        """
        from __future__ import annotations
        from ctxcompact import LLM

        class NeedsLLM:
            def __init__(self, llm: LLM, *, n: int = 1) -> None:
                self.llm = llm
        """
        + _BODY,
    )
    llm = FakeLLM()
    strategy = load_strategy("future_mod:NeedsLLM", dependencies={LLM: llm})
    assert strategy.llm is llm  # type: ignore[attr-defined]


def test_type_checking_only_import_of_a_contract_type_still_resolves(
    write_module: WriteModule,
) -> None:
    # ruff's TC rules move annotation-only imports under TYPE_CHECKING; loading must survive.
    write_module(
        "tc_mod",
        """
        from __future__ import annotations
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from collections.abc import Sequence
            from ctxcompact import LLM

        class Tc:
            def __init__(self, llm: LLM | None = None, *, tags: Sequence[str] = ()) -> None:
                self.llm, self.tags = llm, tags
        """
        + _BODY,
    )
    llm = FakeLLM()
    strategy = load_strategy("tc_mod:Tc", dependencies={LLM: llm}, params={"tags": ["a"]})
    assert strategy.llm is llm  # type: ignore[attr-defined]
    assert list(strategy.tags) == ["a"]  # type: ignore[attr-defined]


def test_subclass_dependency_fills_a_base_class_annotation(write_module: WriteModule) -> None:
    write_module(
        "base_mod",
        """
        class Counter:
            pass

        class UsesCounter:
            def __init__(self, counter: Counter) -> None:
                self.counter = counter
        """
        + _BODY,
    )
    base = importlib.import_module("base_mod")
    sub = type("SubCounter", (base.Counter,), {})
    value = sub()
    strategy = load_strategy("base_mod:UsesCounter", dependencies={sub: value})
    assert strategy.counter is value  # type: ignore[attr-defined]


def test_protocol_dependency_matches_structurally(write_module: WriteModule) -> None:
    # Neither Protocol is runtime_checkable nor subclassed: the value satisfies it by shape.
    write_module(
        "proto_mod",
        """
        from __future__ import annotations
        from typing import Protocol

        class Summarizer(Protocol):
            async def complete(self, messages, *, system=None, tools=None, max_tokens=None): ...

        class Other(Protocol):
            def unrelated(self) -> None: ...

        class UsesProto:
            def __init__(self, other: Other | None = None, summarizer: Summarizer | None = None):
                self.other, self.summarizer = other, summarizer
        """
        + _BODY,
    )
    llm = FakeLLM()
    strategy = load_strategy("proto_mod:UsesProto", dependencies={FakeLLM: llm})
    assert strategy.summarizer is llm  # type: ignore[attr-defined]
    assert strategy.other is None  # type: ignore[attr-defined]


def test_sync_method_does_not_satisfy_an_async_protocol_member(write_module: WriteModule) -> None:
    write_module(
        "proto_sync",
        """
        from ctxcompact import LLM

        class UsesLLM:
            def __init__(self, llm: LLM) -> None:
                self.llm = llm
        """
        + _BODY,
    )

    class SyncLLM:
        def complete(self, messages: object) -> None:
            return None

    message = load_error("proto_sync:UsesLLM", dependencies={SyncLLM: SyncLLM()})
    assert "missing dependency" in message
    assert "'llm'" in message
    assert "SyncLLM" in message


def test_optional_annotation_is_injected_and_default_kept_without_match(
    write_module: WriteModule,
) -> None:
    write_module(
        "opt_mod",
        """
        from typing import Optional
        from ctxcompact import LLM

        class Opt:
            def __init__(self, llm: Optional[LLM] = None, size: int = 7) -> None:
                self.llm, self.size = llm, size
        """
        + _BODY,
    )
    llm = FakeLLM()
    injected = load_strategy("opt_mod:Opt", dependencies={LLM: llm})
    assert (injected.llm, injected.size) == (llm, 7)  # type: ignore[attr-defined]
    kept = load_strategy("opt_mod:Opt")
    assert (kept.llm, kept.size) == (None, 7)  # type: ignore[attr-defined]


def test_none_dependency_value_is_ignored(write_module: WriteModule) -> None:
    write_module(
        "none_mod",
        """
        from ctxcompact import LLM

        class NeedsLLM:
            def __init__(self, llm: LLM) -> None:
                self.llm = llm
        """
        + _BODY,
    )
    assert "missing dependency" in load_error("none_mod:NeedsLLM", dependencies={LLM: None})


def test_exact_key_wins_over_subclass_and_protocol(write_module: WriteModule) -> None:
    write_module(
        "rank_mod",
        """
        class Base:
            async def complete(self, messages, *, system=None, tools=None, max_tokens=None): ...

        class Rank:
            def __init__(self, dep: Base) -> None:
                self.dep = dep
        """
        + _BODY,
    )
    base = importlib.import_module("rank_mod").Base
    sub = type("Sub", (base,), {})
    exact, derived = base(), sub()
    strategy = load_strategy("rank_mod:Rank", dependencies={sub: derived, base: exact})
    assert strategy.dep is exact  # type: ignore[attr-defined]


def test_dependencies_stop_at_star_args(write_module: WriteModule) -> None:
    write_module(
        "star_mod",
        """
        from ctxcompact import LLM

        class Star:
            def __init__(self, *steps: LLM, keep: int = 1) -> None:
                self.steps, self.keep = steps, keep
        """
        + _BODY,
    )
    strategy = load_strategy("star_mod:Star", dependencies={LLM: FakeLLM()}, params={"keep": 3})
    assert (strategy.steps, strategy.keep) == ((), 3)  # type: ignore[attr-defined]


def test_subclass_of_the_protocol_without_init(write_module: WriteModule) -> None:
    write_module(
        "proto_sub",
        """
        from ctxcompact import CompactionStrategy

        class Explicit(CompactionStrategy):
        """
        + _BODY,
    )
    assert type(load_strategy("proto_sub:Explicit")).__name__ == "Explicit"
    message = load_error("proto_sub:Explicit", params={"x": 1})
    assert "takes no keyword-only parameters" in message


def test_dataclass_strategy_fields_are_dependencies(write_module: WriteModule) -> None:
    write_module(
        "dc_mod",
        """
        from __future__ import annotations
        from dataclasses import dataclass, field
        from ctxcompact import LLM

        @dataclass
        class Dc:
            llm: LLM | None = None
            keep: int = field(default=2, kw_only=True)
        """
        + _BODY,
    )
    llm = FakeLLM()
    strategy = load_strategy("dc_mod:Dc", dependencies={LLM: llm}, params={"keep": 4})
    assert (strategy.llm, strategy.keep) == (llm, 4)  # type: ignore[attr-defined]


# -- entry points ---------------------------------------------------------------------


@pytest.fixture
def registered(tmp_path: Path, write_module: WriteModule) -> str:
    """A real distribution on sys.path whose entry_points.txt registers a strategy."""
    write_module(
        "ep_plugin",
        '''
        class EpStrategy:
            """A strategy from a test distribution.

            More text.
            """

            def __init__(self, llm: "LLM | None" = None, *, keep: int = 3) -> None:
                self.keep = keep
        '''
        + _BODY
        + "\n        from ctxcompact import LLM\n",
    )
    write_module("ep_broken", "raise RuntimeError('plugin import exploded')\n")
    dist = tmp_path / "ctxcompact_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ctxcompact-test-plugin\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[ctxcompact.strategies]\n"
        "zz-test-strategy = ep_plugin:EpStrategy\n"
        "zz-test-broken = ep_broken:Nothing\n",
        encoding="utf-8",
    )
    importlib.invalidate_caches()
    return "zz-test-strategy"


def test_entry_point_name_resolves_through_the_same_path(registered: str) -> None:
    strategy = load_strategy(registered, params={"keep": 9})
    assert type(strategy).__name__ == "EpStrategy"
    assert strategy.keep == 9  # type: ignore[attr-defined]


def test_entry_point_errors_name_the_short_name(registered: str) -> None:
    message = load_error(registered, params={"kep": 1})
    assert "unknown parameter 'kep'" in message
    assert "keep: int = 3" in message


def test_unknown_entry_point_name_lists_the_registered_names(registered: str) -> None:
    message = load_error("zz-test-strategie")
    assert "did you mean 'zz-test-strategy'" in message
    assert "tool-result-hiding" in message
    assert "zz-test-strategy" in message.split("registered:")[1]


def test_dotted_name_without_colon_suggests_the_colon_form() -> None:
    message = load_error("my_pkg.strategies.Thing")
    assert "'my_pkg.strategies:Thing'" in message


def test_list_strategies_reports_params_and_errors(registered: str) -> None:
    infos = {info.name: info for info in list_strategies()}
    ours = infos[registered]
    assert ours.target == "ep_plugin:EpStrategy"
    assert ours.summary == "A strategy from a test distribution."
    assert ours.error is None
    [keep] = ours.params
    assert (keep.name, keep.annotation, keep.default, keep.required) == ("keep", "int", 3, False)
    [llm] = ours.dependencies
    assert (llm.name, llm.annotation, llm.default, llm.required) == (
        "llm",
        "LLM | None",
        None,
        False,
    )
    broken = infos["zz-test-broken"]
    assert broken.params == ()
    assert broken.error is not None
    assert "plugin import exploded" in broken.error
    assert "tool-result-hiding" in infos  # the built-ins from pyproject are listed too
    assert list(infos) == sorted(infos)


# -- every error kind ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec", ["", "a:b:c", "mod:", ":Cls", "mod :Cls", "1mod:Cls", "mod:Cls()", "has space"]
)
def test_malformed_spec(spec: str) -> None:
    assert "malformed spec" in load_error(spec)


def test_module_not_found_differs_from_an_import_error_inside(write_module: WriteModule) -> None:
    assert "module 'no_such_module_xyz' not found" in load_error("no_such_module_xyz:Cls")
    write_module("inner_missing", "import no_such_dependency_abc\n")
    message = load_error("inner_missing:Cls")
    assert "was found but importing it failed" in message
    assert "No module named 'no_such_dependency_abc'" in message
    assert "inner_missing.py:" in message  # where it failed


def test_package_found_but_submodule_missing(write_module: WriteModule) -> None:
    write_module("pkg_b.present", "")
    assert "module 'pkg_b.absent' not found" in load_error("pkg_b.absent:Cls")


def test_exception_raised_while_importing(write_module: WriteModule) -> None:
    write_module("raises_mod", "x = 1\nraise ValueError('bad module state')\n")
    message = load_error("raises_mod:Cls")
    assert "ValueError: bad module state" in message
    assert "raises_mod.py:2" in message


def test_syntax_error_in_module(write_module: WriteModule) -> None:
    write_module("syntax_mod", "class Broken(:\n    pass\n")
    message = load_error("syntax_mod:Broken")
    assert "SyntaxError" in message
    assert "syntax_mod.py" in message


def test_missing_attribute_suggests_close_matches(write_module: WriteModule) -> None:
    write_module("attr_mod", "class ToolHiding:" + _COMPACT)
    message = load_error("attr_mod:ToolHidding")
    assert "has no attribute 'ToolHidding'" in message
    assert "did you mean 'ToolHiding'" in message
    message = load_error("attr_mod:Zzz")
    assert "strategy classes there: ToolHiding" in message


def test_not_a_class(write_module: WriteModule) -> None:
    write_module("func_mod", "async def compact(ctx):\n    return None\nINSTANCE = 3\n")
    assert "is a function, not a class" in load_error("func_mod:compact")
    assert "is an instance of int, not a class" in load_error("func_mod:INSTANCE")


def test_missing_dependency_names_parameter_and_type(write_module: WriteModule) -> None:
    write_module(
        "dep_mod",
        """
        from __future__ import annotations
        from ctxcompact import LLM

        class NeedsLLM:
            def __init__(self, llm: LLM) -> None:
                self.llm = llm
        """
        + _BODY,
    )
    message = load_error("dep_mod:NeedsLLM")
    assert "missing dependency" in message
    assert "parameter 'llm'" in message
    assert "needs LLM" in message
    assert "dependencies given: none" in message


def test_unresolvable_annotation_is_reported(write_module: WriteModule) -> None:
    write_module(
        "unres_mod",
        """
        from __future__ import annotations

        class Unres:
            def __init__(self, thing: NotImportedAnywhere) -> None:
                self.thing = thing
        """
        + _BODY,
    )
    message = load_error("unres_mod:Unres", dependencies={FakeLLM: FakeLLM()})
    assert "cannot resolve the annotation of parameter 'thing'" in message
    assert "NotImportedAnywhere" in message


def test_bad_params_list_accepted_params(write_module: WriteModule) -> None:
    write_module(
        "params_mod",
        """
        from __future__ import annotations
        from typing import Literal

        class P:
            def __init__(self, llm: object = None, *, keep: int = 5, mode: Literal["a", "b"] = "a",
                         name: str) -> None:
                pass
        """
        + _BODY,
    )
    wrong_type = load_error("params_mod:P", params={"keep": "five", "name": "n"})
    assert "keep: expected int, got 'five'" in wrong_type
    assert (
        "Accepted params: keep: int = 5, mode: Literal['a', 'b'] = 'a', name: str (required)"
        in (wrong_type)
    )
    unknown = load_error("params_mod:P", params={"keeep": 1, "name": "n"})
    assert "unknown parameter 'keeep'" in unknown
    assert "keep: int = 5" in unknown
    # A quoted number is not a number, as in the config file itself.
    quoted = load_error("params_mod:P", params={"keep": "7", "name": "n"})
    assert "keep: expected int, got '7'" in quoted
    assert "keep: expected int, got 5.0" in load_error(
        "params_mod:P", params={"keep": 5.0, "name": "n"}
    )
    literal = load_error("params_mod:P", params={"mode": "c", "name": "n"})
    assert "mode: expected Literal['a', 'b'], got 'c'" in literal
    assert "name: missing, it is required" in load_error("params_mod:P")
    positional = load_error("params_mod:P", params={"llm": 1, "name": "n"})
    assert "'llm' is a positional parameter" in positional


def test_var_keyword_accepts_other_names(write_module: WriteModule) -> None:
    write_module(
        "varkw_mod",
        """
        class V:
            def __init__(self, *, keep: int = 1, **extra: int) -> None:
                self.extra = extra
        """
        + _BODY,
    )
    assert load_strategy("varkw_mod:V", params={"other": 2}).extra == {"other": 2}  # type: ignore[attr-defined]
    assert "other: expected int" in load_error("varkw_mod:V", params={"other": "x"})


def test_constructor_raised(write_module: WriteModule) -> None:
    write_module(
        "ctor_mod",
        """
        class Ctor:
            def __init__(self, *, keep: int = 1) -> None:
                if keep < 0:
                    raise ValueError("keep must be >= 0")
        """
        + _BODY,
    )
    message = load_error("ctor_mod:Ctor", params={"keep": -1})
    assert "ctor_mod.Ctor(...) raised ValueError: keep must be >= 0" in message
    assert "(at " in message  # where the plugin went wrong
    assert "ctor_mod.py:" in message


def test_a_setting_the_strategy_refuses_names_its_key_not_a_source_line(
    write_module: WriteModule,
) -> None:
    # ConfigError is how a strategy refuses a setting: its key says which; a line of the
    # strategy's source would only point a user at code that did its job.
    write_module(
        "refuse_mod",
        """
        from ctxcompact.exceptions import ConfigError

        class Refuses:
            def __init__(self, *, keep: int = 1) -> None:
                if keep < 0:
                    raise ConfigError(f"must be >= 0, got {keep}", key="keep")
        """
        + _BODY,
    )
    message = load_error("refuse_mod:Refuses", params={"keep": -1})
    assert "raised ConfigError: key 'keep': must be >= 0, got -1" in message
    assert "(at " not in message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("    pass\n", "has no 'compact' method"),
        ("    def compact(self, ctx):\n        return None\n", "must be 'async def compact"),
        ("    compact = 3\n", "must be 'async def compact"),
    ],
)
def test_not_a_strategy(write_module: WriteModule, body: str, expected: str) -> None:
    write_module("notstrat_mod", "class NotStrategy:\n" + body)
    message = load_error("notstrat_mod:NotStrategy")
    assert "is not a compaction strategy" in message
    assert expected in message


def test_compact_with_wrong_arity_is_rejected(write_module: WriteModule) -> None:
    write_module("arity_mod", "class Arity:\n    async def compact(self):\n        return None\n")
    assert "must accept one argument (ctx)" in load_error("arity_mod:Arity")


def test_abstract_class_is_rejected_before_construction(write_module: WriteModule) -> None:
    write_module(
        "abstract_mod",
        """
        import abc

        class Abstract(abc.ABC):
            @abc.abstractmethod
            def helper(self) -> None: ...
        """
        + _BODY,
    )
    assert "is abstract (it does not implement helper)" in load_error("abstract_mod:Abstract")


def test_non_string_spec_is_an_error() -> None:
    with pytest.raises(StrategyLoadError, match="must be a string"):
        load_strategy(42)  # type: ignore[arg-type]


def test_non_type_dependency_key_is_an_error(write_module: WriteModule) -> None:
    write_module(
        "key_mod", "class K:\n    def __init__(self, x: int = 1):\n        pass\n" + _COMPACT
    )
    message = load_error("key_mod:K", dependencies={"int": 1})
    assert "dependency keys must be types" in message


def test_error_chains_the_original_exception(write_module: WriteModule) -> None:
    write_module("chain_mod", "raise KeyError('inner')\n")
    with pytest.raises(StrategyLoadError) as info:
        load_strategy("chain_mod:X")
    assert isinstance(info.value.__cause__, KeyError)


def test_params_must_be_a_mapping(write_module: WriteModule) -> None:
    write_module("pm_mod", "class P:" + _COMPACT)
    assert "params must be a mapping, not list" in load_error("pm_mod:P", params=["keep"])


def test_a_name_registered_twice_for_different_targets_is_an_error(
    tmp_path: Path, registered: str
) -> None:
    dist = tmp_path / "ctxcompact_other_plugin-2.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ctxcompact-other-plugin\nVersion: 2.0\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        f"[ctxcompact.strategies]\n{registered} = other_plugin:Other\n", encoding="utf-8"
    )
    importlib.invalidate_caches()
    message = load_error(registered)
    assert "registered more than once" in message
    assert "ep_plugin:EpStrategy" in message
    assert "other_plugin:Other" in message


def test_builtin_name_and_its_module_path_load_the_same_class() -> None:
    by_name = load_strategy("tool-result-hiding", params={"preserve_recent_n": 3})
    by_path = load_strategy(
        "ctxcompact.strategies:ToolResultHiding", params={"preserve_recent_n": 3}
    )
    assert type(by_name) is type(by_path)
    assert type(by_name).__name__ == "ToolResultHiding"
    message = load_error("tool-result-hiding", params={"preserve_recent": 3})
    assert "did you mean" not in message  # the close-match hint is for names and attributes
    assert "preserve_recent_n: int = 5" in message


def test_builtin_summary_strategy_gets_the_llm_injected() -> None:
    llm = FakeLLM()
    strategy = load_strategy("llm-summary", dependencies={LLM: llm})
    assert llm in vars(strategy).values()


def test_list_strategies_includes_every_builtin() -> None:
    names = {info.name for info in list_strategies()}
    assert {
        "tool-result-hiding",
        "schema1-masking",
        "llm-summary",
        "hiding-then-summary",
        "tool-result-truncation",
        "context-guard",
        "pipeline",
    } <= names


def test_params_coerce_strings_to_paths_and_enums_but_never_scalars_to_scalars(
    write_module: WriteModule,
) -> None:
    write_module(
        "coerce_mod",
        """
        from __future__ import annotations
        import enum
        from pathlib import Path

        class Mode(str, enum.Enum):
            FAST = "fast"
            SLOW = "slow"

        class C:
            def __init__(self, *, path: Path = Path("."), mode: Mode = Mode.FAST,
                         flag: bool = True, names: tuple[str, ...] = (), ratio: float = 0.5
                         ) -> None:
                self.path, self.mode, self.flag, self.names, self.ratio = (
                    path, mode, flag, names, ratio
                )
        """
        + _BODY,
    )
    strategy = load_strategy(
        "coerce_mod:C",
        params={"path": "/tmp/x", "mode": "slow", "names": ["a", "b"], "ratio": 1},
    )
    assert str(strategy.path) == "/tmp/x"  # type: ignore[attr-defined]
    assert strategy.mode.value == "slow"  # type: ignore[attr-defined]
    assert strategy.names == ("a", "b")  # type: ignore[attr-defined]
    assert strategy.ratio == 1.0  # type: ignore[attr-defined]
    assert "flag: expected bool, got 0" in load_error("coerce_mod:C", params={"flag": 0})
    assert "flag: expected bool, got 'yes'" in load_error("coerce_mod:C", params={"flag": "yes"})
