"""Every example in README.md and docs/ runs, and prints what its page shows.

How a page marks what to run and what to expect is in ``tests/helpers/doc_examples.py``.
The tests at the end check that checker: a broken example, a wrong output and a missing
exception each fail.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import missing_extra  # the root conftest: an optional extra a block needs
from ctxcompact import load_config
from tests.helpers.doc_examples import (
    ENV,
    Block,
    Command,
    all_blocks,
    mismatch,
    output_matches,
    parse_page,
    prepare_workdir,
    raised_text,
    run_command,
    run_pytest_file,
    run_python,
)
from tests.helpers.proxy_servers import FakeUpstream, serve_in_thread

BLOCKS = all_blocks()


def run_block(block: Block, folder: Path) -> None:
    """Run one block as the module docstring of the helper says; fail naming page and line."""
    prepare_workdir(folder, block)
    if block.lang == "toml":
        _load_toml(block, folder)
        return
    if block.lang == "console" or "output-of" in block.options:
        _run_commands(block, folder)
        return
    if "pytest" in block.options:
        code, output = run_pytest_file(block, folder, ENV)
        assert code == 0, f"{block.where}: the test file fails under pytest:\n{output}"
        return
    if "fake-openai" in block.options:
        fake = FakeUpstream()
        with serve_in_thread(fake.app()) as url:
            stdout, error = run_python(block, folder, {**ENV, "OPENAI_BASE_URL": f"{url}/v1"})
        assert fake.received, f"{block.where}: the example never reached the fake OpenAI server"
    else:
        stdout, error = run_python(block, folder, ENV)
    _check_python(block, stdout, error)


def _load_toml(block: Block, folder: Path) -> None:
    path = folder / "page-config.toml"
    path.write_text(block.code, encoding="utf-8")
    load_config(path)  # raises ConfigError naming the key when the page's config is wrong


def _run_commands(block: Block, folder: Path) -> None:
    if "output-of" in block.options:
        commands = (Command(tuple(shlex.split(block.options["output-of"])), block.expected or ""),)
    else:
        commands = block.commands
    for command in commands:
        code, output = run_command(command.argv, folder, ENV)
        shown = " ".join(command.argv)
        missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", output)
        extra = missing_extra(ModuleNotFoundError(name=missing[1])) if missing else None
        if code != 0 and extra is not None:
            pytest.skip(f"{block.where}: `{shown}` needs the '{extra}' extra")
        assert code == 0, f"{block.where}: `{shown}` exited {code}:\n{output[-3000:]}"
        assert output_matches(command.expected, output), mismatch(
            block, command.expected, output, f"output of `{shown}`"
        )


def _check_python(block: Block, stdout: str, error: BaseException | None) -> None:
    expected_error = block.options.get("raises")
    if error is not None and expected_error is None:
        extra = missing_extra(error)
        if extra is not None:
            pytest.skip(
                f"{block.where} needs the '{extra}' extra: pip install 'ctxcompact[{extra}]'"
            )
        raise AssertionError(f"{block.where}: the example raised {error!r}") from error
    if expected_error is not None:
        assert error is not None, f"{block.where}: the example should raise {expected_error}"
        assert type(error).__name__ == expected_error, f"{block.where}: raised {error!r}"
        got = raised_text(error)
        if block.expected is not None:
            assert output_matches(block.expected, got), mismatch(block, block.expected, got)
        return
    if block.expected is not None:
        assert output_matches(block.expected, stdout), mismatch(block, block.expected, stdout)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_the_example_runs_and_prints_what_the_page_shows(block: Block, tmp_path: Path) -> None:
    run_block(block, tmp_path)


def test_the_pages_have_examples_to_run() -> None:
    pages = {b.path.name for b in BLOCKS}
    assert "README.md" in pages
    assert sum(b.lang == "python" for b in BLOCKS) >= 20
    assert any(b.expected for b in BLOCKS if b.lang == "python")
    assert any(b.lang == "console" for b in BLOCKS)


# -- the checker itself ----------------------------------------------------------------------


def page(tmp_path: Path, text: str) -> list[Block]:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return [b for b in parse_page(path) if b.runnable]


@pytest.fixture
def pages_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A page folder inside the checkout's root, as ``Block.where`` expects."""
    import tests.helpers.doc_examples as helper

    monkeypatch.setattr(helper, "ROOT", tmp_path)
    return tmp_path


def test_a_broken_example_fails(pages_dir: Path) -> None:
    (block,) = page(pages_dir, "```python\nfrom ctxcompact import NoSuchName\n```\n")
    work = pages_dir / "work"
    work.mkdir()
    with pytest.raises(AssertionError, match=r"page\.md:1: the example raised ImportError"):
        _check_python(block, *run_python(block, work, ENV))


def test_an_output_that_differs_from_the_page_fails(pages_dir: Path) -> None:
    text = "```python\nprint(1 + 1)\n```\n\nprints\n\n```text\n3\n```\n"
    (block,) = page(pages_dir, text)
    assert block.expected == "3"
    stdout, error = run_python(block, pages_dir, ENV)
    assert (stdout, error) == ("2\n", None)
    with pytest.raises(AssertionError, match=r"page\.md:1: the output differs") as info:
        _check_python(block, stdout, error)
    assert "-3" in str(info.value)
    assert "+2" in str(info.value)


def test_inline_prints_and_an_ellipsis_are_read(pages_dir: Path) -> None:
    text = "```python\nprint('a', 'b' * 30)\n```\n\nprints `a bbb...b`. More text.\n"
    (block,) = page(pages_dir, text)
    assert block.expected == "a bbb...b"
    _check_python(block, *run_python(block, pages_dir, ENV))


def test_an_expected_exception_must_happen(pages_dir: Path) -> None:
    text = (
        "<!-- example: raises=ValueError -->\n```python\nint('x')\n```\n\n"
        "```text\nValueError: invalid literal for int() with base 10: 'x'\n```\n"
    )
    (block,) = page(pages_dir, text)
    _check_python(block, *run_python(block, pages_dir, ENV))
    quiet = Block(block.path, block.line, "python", "x = 1\n", block.expected, block.options)
    with pytest.raises(AssertionError, match="should raise ValueError"):
        _check_python(quiet, *run_python(quiet, pages_dir, ENV))


def test_a_console_command_without_output_shown_is_not_run(pages_dir: Path) -> None:
    text = (
        "```console\n$ pip install ctxcompact\n$ ctxcompact strategies --json\n"
        '{"schema": ...\n$ export X=1\n```\n'
    )
    (block,) = page(pages_dir, text)
    assert [c.argv for c in block.commands] == [("ctxcompact", "strategies", "--json")]


def test_a_config_block_that_does_not_load_fails(pages_dir: Path) -> None:
    from ctxcompact.exceptions import ConfigError

    text = "<!-- example: config -->\n```toml\n[compaction]\nmax_context_sise = 1000\n```\n"
    (block,) = page(pages_dir, text)
    with pytest.raises(ConfigError, match="max_context_sise"):
        _load_toml(block, pages_dir)
