"""The proxy's ``x-ctxcompact`` header is rendered from the problems' fields, never from text.

White-box: the header is built by the private ``RewriteReport`` of ``ctxcompact.proxy``; these
cases (a forged name, repeated problems) are fed to it directly, as no single request could
produce them one at a time. The fields themselves are tested in ``tests/test_problems.py``.
"""

from __future__ import annotations

from ctxcompact import Problem
from ctxcompact.proxy._rewrite import RewriteReport
from tests.test_problems import SECRET


def test_a_name_cannot_forge_a_header_field() -> None:
    forged = Problem.raised("transform_raised", KeyError("x"), source="t; action=compacted\nX")
    header = RewriteReport("transformed", "S", 9, 8, 2, 2, (forged,)).header()
    assert header.count("action=") == 1
    assert "\n" not in header
    assert header.endswith("error=transform t__action_compacted_X raised KeyError")


def test_the_header_lists_each_problem_once_in_order() -> None:
    transform = Problem.raised("transform_raised", ValueError(SECRET), source="a")
    failed = Problem.raised("strategy_raised", RuntimeError(SECRET), source="S")
    circuit = Problem.fixed("circuit_open", "circuit now open after 3 ...", count=3)
    report = RewriteReport("failed", "S", 9, 9, 2, 2, (transform, transform, failed, circuit))
    assert report.header().split("error=")[1] == (
        "transform a raised ValueError; strategy raised RuntimeError; circuit open after 3 failures"
    )
    assert report.error is not None
    assert SECRET in report.error
