"""Comments and docstrings in ``nbtune/`` say what the code is and why, not its history.

A comment that cites an issue ("issue N"), a working session ("session N"), a
commit hash or a timing measured on some machine ("5 ms on this 2-core box") ages
badly: a reader of the code cannot follow it, and the code moves on while the
citation stays. Those belong in commit messages and ``benchmarks/RESULTS.md``.
This test reads every module's comments (with :mod:`tokenize`) and docstrings (with
:mod:`ast`: module, class and function docstrings, and the bare strings that document
an attribute) and fails on such a citation, naming the file and line.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import nbtune

ROOT = Path(nbtune.__file__).parent

#: a hex token long enough to be an abbreviated commit hash, with a digit in it
#: (so that words such as "deadbeef" or "defaced" are not taken for one)
_HASH = r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"

#: a duration: a number (or a range) and a unit of time
_TIME = r"\b\d+(?:[.,]\d+)?(?:\s?[-–]\s?\d+(?:\.\d+)?)?\s?(?:ms|µs|us|s|sec|secs|seconds|min|minutes)\b"
#: where a duration was measured: this machine, "on this 2-core box"
_HERE = (r"\b(?:on this (?:box|machine|host|laptop|runner|VM|\d+-core)"
         r"|this (?:box|machine|host|laptop|runner)|\d+-core (?:box|machine|host|laptop|runner|VM))\b")

#: what a comment or docstring must not cite
CITATIONS: dict[str, re.Pattern[str]] = {
    "issue": re.compile(r"\b(?:[Ii]ssue|PR|[Pp]ull request) ?#?\d+"),
    "session": re.compile(r"\b[Ss]ession ?#?\d+"),
    # a hash within a few words of "commit", on either side
    "commit": re.compile(
        rf"\b[Cc]ommit(?:s|ted)?\b[^\n]{{0,30}}?{_HASH}|{_HASH}[^\n]{{0,30}}?\b[Cc]ommit"
    ),
    # a duration next to where it was measured, or called measured
    "timing": re.compile(
        rf"{_TIME}[^\n]{{0,40}}?{_HERE}|{_HERE}[^\n]{{0,40}}?{_TIME}"
        rf"|[Mm]easured (?:at |as |to be |here )?(?:~|about )?{_TIME}|{_TIME},? measured"
    ),
}


def comments(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every ``#`` comment in ``source``."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]


def docstrings(source: str, filename: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every docstring and every bare string statement (an attribute's doc)."""
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def citations(text: str) -> list[str]:
    """The citations ``text`` makes, as ``kind: 'match'``."""
    return [
        f"{kind}: {m.group(0)!r}"
        for kind, pattern in CITATIONS.items()
        for m in pattern.finditer(text)
    ]


def cited_in(root: Path) -> list[str]:
    """``path:line: citation`` for every citation in the comments and docstrings under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        rel = path.relative_to(root.parent)
        for line, text in comments(source) + docstrings(source, str(path)):
            found += [f"{rel}:{line}: {c}" for c in citations(text)]
    return found


def test_the_patterns_catch_a_citation_and_pass_a_plain_reason():
    assert citations("# Issue 15: the gate waits on the state")
    assert citations("# see issue #12")
    assert citations("as in session 9, on the GPU machine")
    assert citations("reverted in commit 3609bf8")
    assert citations("(1021680, the merge commit)")
    assert not citations("# waits on the state, since the page loads at its own pace")
    assert not citations("one session per browser tab; the store's hash is sha256")
    assert not citations("commit the store's rows before trial 12 is read")
    assert not citations("a worker's session: a kernel interrupt must not reach it")
    assert citations("# 5-6 ms on this 2-core box")
    assert citations("a fit took 12 s on this machine")
    assert citations("measured 3.2 ms per call")
    assert citations("(0.4 s measured)")
    assert not citations("the median of the measured ones, else 1 s/unit")
    assert not citations("A nanny gives its worker 5 s to exit; on a heavily loaded machine")
    assert not citations("billed per minute (60 s on AWS), idle or not")
    assert not citations("4 s of samples at Dask's 1 Hz")


def test_no_comment_or_docstring_cites_an_issue_a_session_a_commit_or_a_timing():
    found = cited_in(ROOT)
    assert not found, (
        "comments and docstrings cite history (it belongs in the commit message):\n"
        + "\n".join(found)
    )
