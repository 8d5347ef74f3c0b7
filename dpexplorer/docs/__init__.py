"""The project's own documentation: the formulas and conventions the code relies on.

One Markdown file per topic, shipped with the package next to the code and
rendered by the app's Learn page::

    from dpexplorer import docs

    docs.topics()              # [("overview", "Queries, data and notation"), ...]
    docs.topic("noise")        # the Markdown text of one topic

Docstrings cite the papers (section, equation); these pages explain the same
in words for users.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["TOPICS", "topics", "topic", "title"]

#: Topic names in reading order (each is ``<name>.md`` in this package).
TOPICS = ("overview", "noise", "matrix_mechanism", "svd_bound", "strategies", "hdmm",
          "eigen_design", "residual_planner", "dawa", "sums", "accounting", "intervals",
          "inference", "accuracy", "data", "public_domain", "continual")


def topic(name: str) -> str:
    """The Markdown text of one topic.

    Parameters
    ----------
    name : str
        One of :data:`TOPICS`.

    Returns
    -------
    str
        Markdown, starting with a ``# Title`` line.

    Raises
    ------
    KeyError
        For an unknown topic, listing the known ones.
    """
    if name not in TOPICS:
        raise KeyError(f"no documentation topic {name!r}; topics: {list(TOPICS)}")
    return resources.files(__name__).joinpath(f"{name}.md").read_text(encoding="utf-8")


def title(name: str) -> str:
    """The title of a topic (its first level-1 heading, ``# Title``)."""
    for line in topic(name).splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return name  # pragma: no cover - every topic starts with a title (tested)


def topics() -> list[tuple[str, str]]:
    """``(name, title)`` of every topic, in reading order."""
    return [(name, title(name)) for name in TOPICS]
