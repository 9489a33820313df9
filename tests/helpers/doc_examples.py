"""The code blocks of README.md and docs/, read as examples to run and outputs to compare.

What runs, and how a page says what to expect:

* A ```` ```python ```` block runs as a script (``__name__ == "__main__"``) in a fresh
  working folder. Its printed output is compared when the page shows it: a ```` ```text ````
  block right after it (after a line ``prints``, or directly), or ``prints `...` `` written
  inline on the next line. Without either, the block must run without an error.
* A ```` ```console ```` block: each ``$ ctxcompact ...`` or ``$ python ...`` command whose
  output the page shows (the lines under it, up to the next ``$``) runs, and its output is
  compared. Commands with no output shown (installs, servers, ``export``) are not run.
* ``...`` in an expected output stands for any text (doctest's ``ELLIPSIS``); trailing
  spaces and trailing blank lines are ignored; everything else must match exactly.

An HTML comment on the line before a block (invisible on GitHub and on the site) can say
more, as ``key`` or ``key=value`` words:

* ``file=NAME``: the block is also saved as ``NAME`` in the working folder, for the blocks
  after it on the same page (a module to import, a ``config.toml`` to load).
* ``config``: a ``toml`` block is a whole configuration; it must load with
  :func:`ctxcompact.load_config`.
* ``pytest``: a ``python`` block is a test file; it runs under pytest and must pass.
* ``raises=NAME``: the block must raise the exception ``NAME``; the ``text`` block after it
  is ``module.Name: message`` as Python prints it.
* ``fake-openai``: ``OPENAI_BASE_URL`` points at a fake OpenAI server on 127.0.0.1 for this
  block (an example that talks to a model over the real SDK).
* ``output-of="COMMAND"``: before a ``text`` block, the output of ``COMMAND`` (run as in a
  ``console`` block) is compared with it.

The working folder holds links to the checkout's ``tests/``, ``examples/``,
``strategies/`` and ``config.example.toml`` (pages name them "from a checkout") and a
``my_recordings/`` folder with three public traces. The environment has placeholder API keys
and ``OPENAI_BASE_URL`` pointing at a closed port, so no example can reach a provider.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
LINKED = ("tests", "examples", "strategies", "config.example.toml")
RECORDINGS = (
    "tests/data/traces/claudecode-subagent__4d5611e5__a2898e3.json",
    "tests/data/traces/msa-gemini3pro__astropy__astropy-12907.json",
    "tests/data/traces/taubench-gpt4o-airline__task3_trial0.json",
)
"""The public traces in ``my_recordings/`` (a page's "your own recorded conversations")."""

ENV = {
    "OPENAI_API_KEY": "sk-docs-example-not-a-key",
    "ANTHROPIC_API_KEY": "sk-ant-docs-example-not-a-key",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
    "NO_COLOR": "1",
}

_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w-]*)(.*)$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*example:(.*?)-->\s*$")
_INLINE_PRINTS = re.compile(r"^prints `(.+?)`(?:[.,;:]|\s|$)")
_RUNNABLE = re.compile(r"^(ctxcompact|python|python3(?:\.\d+)?)\b")


@dataclass(frozen=True)
class Command:
    """One ``$`` line of a console block and the output the page shows under it."""

    argv: tuple[str, ...]
    expected: str


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page, with what the page says about it."""

    path: Path
    line: int
    lang: str
    code: str
    expected: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    commands: tuple[Command, ...] = ()

    @property
    def where(self) -> str:
        """``README.md:123``: the page and the line of the opening fence."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        """Whether the test suite runs this block (see the module docstring)."""
        if self.lang == "python":
            return True
        if self.lang == "console":
            return bool(self.commands)
        if self.lang == "toml":
            return "config" in self.options
        return "output-of" in self.options


@dataclass
class _Fence:
    start: int
    lang: str
    body: list[str]
    end: int


def _fences(lines: list[str]) -> list[_Fence]:
    found: list[_Fence] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, ticks, lang = match[1], match[2], match[3]
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        found.append(_Fence(i, lang, body, j))
        i = j + 1
    return found


def parse_options(text: str) -> dict[str, str]:
    """``file=a.py config raises=X output-of="ctxcompact replay"`` as a mapping.

    Example:
        >>> parse_options('file=a.py config output-of="ctxcompact replay"')
        {'file': 'a.py', 'config': '', 'output-of': 'ctxcompact replay'}
    """
    options: dict[str, str] = {}
    for word in shlex.split(text):
        key, _, value = word.partition("=")
        options[key] = value
    return options


def _directive(lines: list[str], start: int) -> dict[str, str]:
    k = start - 1
    while k >= 0 and not lines[k].strip():
        k -= 1
    match = _DIRECTIVE.match(lines[k]) if k >= 0 else None
    return parse_options(match[1]) if match else {}


def _commands(body: list[str]) -> tuple[Command, ...]:
    commands: list[Command] = []
    current: str | None = None
    output: list[str] = []

    def close() -> None:
        if current is None:
            return
        argv = tuple(shlex.split(current, comments=True))
        text = "\n".join(output).strip("\n")
        if text and argv and _RUNNABLE.match(argv[0]):
            commands.append(Command(argv, text))

    joined: list[str] = []
    for line in body:  # a command continued with a backslash is one line
        if joined and joined[-1].startswith("$ ") and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    for line in joined:
        if line.startswith("$ "):
            close()
            current, output = line[2:], []
        else:
            output.append(line)
    close()
    return tuple(commands)


def parse_page(path: Path) -> list[Block]:
    """Every fenced block of one Markdown page, with its expected output and options."""
    lines = path.read_text(encoding="utf-8").splitlines()
    fences = _fences(lines)
    blocks: list[Block] = []
    for k, fence in enumerate(fences):
        options = _directive(lines, fence.start)
        expected: str | None = None
        if fence.lang == "python":
            expected = _expected_after(lines, fence, fences[k + 1] if k + 1 < len(fences) else None)
        if fence.lang == "text" and "output-of" in options:
            expected = "\n".join(fence.body)
        blocks.append(
            Block(
                path=path,
                line=fence.start + 1,
                lang=fence.lang,
                code="\n".join(fence.body) + "\n",
                expected=expected,
                options=options,
                commands=_commands(fence.body) if fence.lang == "console" else (),
            )
        )
    return blocks


def _expected_after(lines: list[str], fence: _Fence, following: _Fence | None) -> str | None:
    k = fence.end + 1
    while k < len(lines) and not lines[k].strip():
        k += 1
    if k >= len(lines):
        return None
    text = lines[k].strip()
    inline = _INLINE_PRINTS.match(text)
    if inline:
        return inline[1]
    if text in ("prints", "prints:"):
        k += 1
        while k < len(lines) and not lines[k].strip():
            k += 1
    if following is not None and following.start == k and following.lang == "text":
        return "\n".join(following.body)
    return None


def all_blocks(pages: tuple[Path, ...] = PAGES) -> list[Block]:
    """The runnable blocks of every page, each distinct block once (the first place it is).

    The site's pages start as copies of README sections, so an example may be on two pages;
    the same code with the same expected output and options runs once.
    """
    seen: set[tuple[str, str, str | None, str, tuple[Command, ...]]] = set()
    out: list[Block] = []
    for page in pages:
        for block in parse_page(page):
            if not block.runnable:
                continue
            key = (block.lang, block.code, block.expected, repr(block.options), block.commands)
            if key in seen:
                continue
            seen.add(key)
            out.append(block)
    return out


def earlier_files(block: Block) -> dict[str, str]:
    """The ``file=`` blocks of the same page above ``block`` (name -> text)."""
    return {
        other.options["file"]: other.code
        for other in parse_page(block.path)
        if "file" in other.options and other.line < block.line
    }


# -- running -------------------------------------------------------------------------------


def prepare_workdir(folder: Path, block: Block) -> None:
    """Links to the checkout, ``my_recordings/``, and the page's earlier ``file=`` blocks."""
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    recordings = folder / "my_recordings"
    recordings.mkdir()
    for trace in RECORDINGS:
        (recordings / Path(trace).name).symlink_to(ROOT / trace)
    for name, text in {**earlier_files(block), **_own_file(block)}.items():
        (folder / name).write_text(text, encoding="utf-8")


def _own_file(block: Block) -> dict[str, str]:
    return {block.options["file"]: block.code} if "file" in block.options else {}


def normalise(text: str) -> str:
    """Trailing spaces and trailing blank lines removed."""
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def output_matches(expected: str, got: str) -> bool:
    """``got`` is ``expected``, where ``...`` may stand for any text.

    Example:
        >>> output_matches("a\\n...\\nz", "a\\nb\\nc\\nz  \\n")
        True
        >>> output_matches("a 1", "a 2")
        False
    """
    want, have = normalise(expected) + "\n", normalise(got) + "\n"
    return doctest.OutputChecker().check_output(want, have, doctest.ELLIPSIS)


def mismatch(block: Block, expected: str, got: str, what: str = "output") -> str:
    """A message naming the page and line, with a diff of what the page shows and what ran."""
    diff = difflib.unified_diff(
        normalise(expected).splitlines(),
        normalise(got).splitlines(),
        "shown on the page",
        "printed",
        lineterm="",
    )
    return f"{block.where}: the {what} differs from what the page shows:\n" + "\n".join(diff)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_python(block: Block, folder: Path, env: dict[str, str]) -> tuple[str, BaseException | None]:
    """Run a ``python`` block in this process, from ``folder``; (stdout, exception or None).

    In-process, so that the suite pays for ``import ctxcompact`` once; each block gets a
    fresh namespace, and the folder is first on ``sys.path`` for its ``file=`` modules.
    """
    out = io.StringIO()
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": str(folder / "example.py")}
    cwd = Path.cwd()
    sys.path.insert(0, str(folder))
    imported = set(sys.modules)
    error: BaseException | None = None
    # A loop of the block's own, closed afterwards: frameworks' sync entry points (pydantic-ai's
    # run_sync) use the thread's current loop and leave it open, as a script may at its exit.
    policy = asyncio.get_event_loop_policy()
    loop = asyncio.new_event_loop()
    policy.set_event_loop(loop)
    try:
        os.chdir(folder)
        with _environment(env), contextlib.redirect_stdout(out):
            code = compile(block.code, block.where, "exec")
            exec(code, namespace)
    except BaseException as exc:  # the page may expect it (raises=...)
        error = exc
    finally:
        with contextlib.suppress(RuntimeError):
            current = policy.get_event_loop()
            if current is not loop and not current.is_running():
                current.close()
        loop.close()
        policy.set_event_loop(None)
        os.chdir(cwd)
        sys.path.remove(str(folder))
        for name in set(sys.modules) - imported:  # the page's own modules, not the library's
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(folder)):
                del sys.modules[name]
    return out.getvalue(), error


def raised_text(error: BaseException) -> str:
    """``module.Name: message``, the last line of a traceback, as a page shows it."""
    return "".join(traceback.format_exception_only(type(error), error))


def run_command(argv: tuple[str, ...], folder: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run one console command from ``folder`` with this interpreter; (exit code, stdout)."""
    if argv[0] == "ctxcompact":
        full = [sys.executable, "-m", "ctxcompact", *argv[1:]]
    else:
        full = [sys.executable, *argv[1:]]
    done = subprocess.run(
        full,
        cwd=folder,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + (done.stderr if done.returncode else "")


def run_pytest_file(block: Block, folder: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run a ``pytest`` block as a test file in a fresh pytest process."""
    test_file = folder / "test_page_example.py"
    test_file.write_text(block.code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=folder,
        env={**os.environ, **env, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
