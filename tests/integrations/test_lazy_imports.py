"""``import ctxcompact`` loads no framework; a missing framework names its pip line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

FRAMEWORKS = ("pydantic_ai", "agents", "langchain", "langchain_core", "langgraph")


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )


def test_importing_ctxcompact_and_the_package_loads_no_framework() -> None:
    result = run_python(
        f"""
        import sys
        import ctxcompact, ctxcompact.integrations
        loaded = [name for name in {FRAMEWORKS!r} if name in sys.modules]
        print(loaded)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("openai_agents", "agents", "openai-agents"),
        ("langchain", "langchain", "langchain"),
    ],
)
def test_a_missing_framework_names_the_pip_line(module: str, blocked: str, extra: str) -> None:
    # sys.modules[name] = None makes `import name` raise ImportError, as if not installed.
    result = run_python(
        f"""
        import sys
        sys.modules[{blocked!r}] = None
        from ctxcompact.exceptions import MissingDependencyError
        try:
            import ctxcompact.integrations.{module}
        except MissingDependencyError as exc:
            print(exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert f"pip install 'ctxcompact[{extra}]'" in result.stdout
    assert f"ctxcompact.integrations.{module}" in result.stdout
