"""Static types: mypy with the project's configuration (``[tool.mypy]`` in pyproject.toml).

The privacy kernel (``dpexplorer/privacy/``) and the mechanism registry are checked with the
flags of ``mypy --strict``; the rest of the engine (``dpexplorer/`` less the UI) at mypy's
default level.  A cold run takes about a minute (mypy's cache, ``.mypy_cache``, makes a second
one take seconds).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import mypy.api
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mypy(*args: str, where: Path = ROOT) -> tuple[str, int]:
    """mypy's report and exit status, run in ``where`` with the project's configuration."""
    cwd = os.getcwd()
    os.chdir(where)  # the configuration's paths (files, exclude) are relative to the project root
    try:
        out, err, status = mypy.api.run(["--config-file", str(ROOT / "pyproject.toml"), *args])
    finally:
        os.chdir(cwd)
    return out + err, status


@pytest.mark.slow
def test_engine_type_checks():
    """``python -m mypy`` from the project root: no error in the engine, strict in the kernel."""
    text, status = _mypy()
    errors = [line for line in text.splitlines() if ": error:" in line]
    assert status == 0 and not errors, f"mypy found {len(errors)} error(s):\n" + "\n".join(errors[:60])
    assert re.search(r"Success: no issues found in \d+ source files", text), text


@pytest.mark.slow
def test_the_kernel_is_checked_strictly(tmp_path):
    """The strict flags reach the kernel: an unannotated function there is an error, elsewhere not.

    Checks the configuration itself (a per-module ``strict = true`` would have turned strict
    mode on everywhere, an override that names no module would check nothing strictly), on two
    copies of a tiny module placed as ``dpexplorer.privacy`` and ``dpexplorer.sums`` modules.
    """
    probe = "def untyped(x):\n    return x\n\n\ndef typed(x: int) -> int:\n    return x\n"
    for pkg in ("privacy", "sums"):
        d = tmp_path / "dpexplorer" / pkg
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
        (d / "probe.py").write_text(probe)
    (tmp_path / "dpexplorer" / "__init__.py").write_text("")
    text, status = _mypy("--no-incremental", "dpexplorer/privacy/probe.py", "dpexplorer/sums/probe.py",
                         where=tmp_path)
    errors = [line for line in text.splitlines() if ": error:" in line]
    assert status == 1, text
    assert len(errors) == 1 and "privacy" in errors[0] and "[no-untyped-def]" in errors[0], text
