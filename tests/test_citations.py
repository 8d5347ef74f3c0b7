"""The repository cites what its readers have.

A docstring, comment, test or document may cite a paper (authors, venue, section, equation)
or the package's own ``dpexplorer/docs/`` topics, but not notes kept outside the repository
nor the numbers of the project's issues: neither exists for someone who installs the package
or clones the repository.  Every tracked text file is checked (``git ls-files``; the package,
tests, benchmarks, apps, docs, README, pyproject).

The patterns are built from pieces so that this file does not match itself.  A link to a
third-party project's issue (``https://github.com/<owner>/<repo>/issues/<n>``) is allowed: it
is something a reader can open, and the issue pattern needs a space, ``#`` or ``-`` before the
number, never ``/``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_NOTES = "MATH" + r"\.md"
_SHARED = r"\.\./" + "shared" + "|" + r"\bshared/" + "(?:notes|papers)"
_ISSUE = r"\bissue" + r"s?[ #-]*\d+"
#: What a reader does not have: the development notes, the folder beside the repository
#: that holds them and the papers' extracted texts, and the project's issue numbers.
FORBIDDEN = re.compile(f"{_NOTES}|{_SHARED}|{_ISSUE}", re.IGNORECASE)

#: Where tracked files are looked for when the tree is not a git checkout (an unpacked sdist).
_ROOTS = ("dpexplorer", "tests", "benchmarks", "apps", "docs", "README.md", "pyproject.toml")


def tracked_text_files() -> list[Path]:
    """Every tracked file of the repository that reads as UTF-8 text."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=60).stdout.decode()
        paths = [ROOT / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):
        paths = []
        for name in _ROOTS:
            p = ROOT / name
            paths += [p] if p.is_file() else [q for q in p.rglob("*") if q.is_file()]
    texts = []
    for p in paths:
        try:
            p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue                                       # binary files, deleted in the tree
        texts.append(p)
    return texts


def test_the_scan_sees_the_repository():
    names = {p.relative_to(ROOT).as_posix() for p in tracked_text_files()}
    assert len(names) > 100
    for needed in ("README.md", "pyproject.toml", "dpexplorer/core/error.py",
                   "dpexplorer/docs/noise.md", "tests/test_citations.py"):
        assert needed in names


def test_no_tracked_file_cites_notes_outside_the_repository_or_issue_numbers():
    hits = []
    for p in tracked_text_files():
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            hits += [f"{p.relative_to(ROOT)}:{i}: {m.group(0)!r}" for m in FORBIDDEN.finditer(line)]
    assert hits == [], "cite a paper or dpexplorer/docs instead:\n" + "\n".join(hits)


@pytest.mark.parametrize("text", [
    "see " + "MATH" + ".md, Noise", "(" + "math" + ".md)", "../" + "shared/data/x.npy",
    "shared/" + "notes/x", "shared/" + "papers/README.md",
    "is" "sue 14", "Is" "sue 17 item 3", "is" "sues 16 and 17", "is" "sue #5", "is" "sue-14 target",
])
def test_the_check_has_teeth(text):
    assert FORBIDDEN.search(text)


@pytest.mark.parametrize("text", [
    "https://github.com/holoviz/panel/" + "is" "sues/1234",   # a third party's issue: openable
    "Success: no is" "sues found in 12 source files",
    "the app's shared session", "shared by the four runs", "the issue of scale",
])
def test_the_check_leaves_ordinary_text_alone(text):
    assert not FORBIDDEN.search(text)
