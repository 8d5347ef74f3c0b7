"""The app's words for engine messages: the control to change instead of what a Python
caller passes, and size limits in plain words."""

from __future__ import annotations

import re

import dpexplorer as dpx

__all__ = ["PYTHON_SPEAK", "app_text", "exception_message", "limit_text"]


#: Engine advice written for Python callers, and the control a user of the app changes instead.
PYTHON_SPEAK = (
    (re.compile(r"use dpx\.Gaussian\([^()]*calibration='zcdp'\)"),
     "choose 'zCDP (releases)' under Settings → Gaussian calibration in the sidebar"),
    (re.compile(r"use calibration='analytic'"),
     "choose 'analytic (study)' under Settings → Gaussian calibration in the sidebar"),
    (re.compile(r"\b[Uu]se dpx\.Gaussian\([^()]*\)"), "choose Gaussian noise in the sidebar"),
    (re.compile(r"pass x= \(or use dpx\.evaluate\)|pass x=[^;.)]*"),
     "run it on a dataset (Data & DAWA page)"),
    (re.compile(r"use opt_kron, opt_plus or hdmm"), "choose OPT⊗, OPT+ or HDMM"),
    (re.compile(r"download the histograms with dpx\.datasets\.fetch_dpbench\(\), pass the "
                r"folder holding 1D/ and 2D/ \.npy files, or set DPEXPLORER_DPBENCH"),
     "type the folder holding the 1D/ and 2D/ .npy files under Settings → DPBench folder "
     "(the README says how to download them)"),
    (re.compile(r"\s*\(scope='kronecker' accepts any union of Kronecker products\)"),
     " (HDMM or OPT⊗ take any union of Kronecker products)"),
    (re.compile(r"\bSession\."), ""),
)

#: The engine's size-limit message (:class:`dpexplorer.queries.limits.LimitExceededError`)
#: inside a longer text: what was asked for, the limit, and advice for Python callers.
_LIMIT_MESSAGE = re.compile(
    r"(?:(?<=: )|^)[^:;]*? (?:= (?P<value>[\d,]+) )?is above the `(?P<limit>\w+)` limit of "
    r"(?P<allowed>[\d,]+) \((?P<bounds>[^)]*)\); nothing was allocated\. On a machine with the "
    r"memory for it, raise the limit: .*?DPEXPLORER_LIMITS='\w+=\.\.\.'")


def limit_text(limit: str, value: int | None, allowed: int, bounds: str) -> str:
    """A size limit passed, in words: ``limit`` (a ``Limits`` field), ``value`` asked for (or
    None), ``allowed`` and ``bounds`` (what it counts)."""
    asked = f"{value:,} {bounds}" if value is not None else f"more {bounds}"
    return (f"This needs {asked}, above the explorer's limit of {allowed:,}; nothing was "
            "computed. Make the domain, workload or strategy smaller (whoever runs this "
            f"server can raise the {limit} limit in its {dpx.limits.ENV_VAR} setting).")


def _limit_sub(found: re.Match) -> str:
    value = found["value"]
    return limit_text(found["limit"], int(value.replace(",", "")) if value else None,
                      int(found["allowed"].replace(",", "")), found["bounds"])


def app_text(message: str) -> str:
    """``message`` with advice for Python callers replaced by the app control to change
    (:data:`PYTHON_SPEAK`), and size limits in the app's words (:func:`limit_text`)."""
    text = _LIMIT_MESSAGE.sub(_limit_sub, str(message))
    for pattern, instead in PYTHON_SPEAK:
        text = pattern.sub(instead, text)
    return text


def exception_message(exc: BaseException) -> str:
    """The user-facing text of an exception in the app's words (:func:`app_text`,
    :func:`limit_text`): its message (a KeyError's without quotes), or its type."""
    if isinstance(exc, dpx.limits.LimitExceededError):
        return limit_text(exc.limit, exc.value, exc.allowed, exc.bounds)
    msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return app_text(msg) or type(exc).__name__
