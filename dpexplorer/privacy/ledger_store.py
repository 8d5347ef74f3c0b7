"""A dataset's privacy ledger kept in a SQLite file, shared by every process that opens it.

:meth:`dpexplorer.privacy.PrivacyLedger.open` keeps its log here.  One file
holds the ledgers of many datasets (the served explorer keeps all of its in
one).  Python's :mod:`sqlite3` with:

* **WAL mode** (readers never block the writer) and ``synchronous=FULL``
  (a committed spend survives a crash of the process *and* of the machine);
* every check-and-record in one ``BEGIN IMMEDIATE`` transaction: the write
  lock is taken *before* the dataset's totals are read, so two processes
  cannot both read the same totals, both pass the check and together go over
  the budget (serialisable, as SQLite's documentation on transactions says);
* the spend committed before the kernel draws its noise: a process killed
  between the two has spent and drawn nothing -- budget wasted, never leaked;
* the schema versioned by ``PRAGMA user_version`` (:data:`SCHEMA_VERSION`); a
  file of another version is refused with a clear error rather than misread;
* append-only by construction: triggers refuse any ``DELETE`` and any
  ``UPDATE`` other than settling an open reservation *down* (see
  :class:`~dpexplorer.privacy.ledger.Reservation`).

Tables: ``datasets(name, budget_kind, budget_epsilon, budget_delta,
budget_rho, created)`` and ``log(id, dataset, kind, parent, label, mode,
time, epsilon, delta, rho, reserved_*, state, noise, queries, sensitivity)``;
a dataset's totals are the sums over its rows with no ``parent`` (spends and
reservations; stages are counted inside their reservation).  They are kept,
in the same transaction as every insert and settlement, as exact rationals
(``spent_*`` of ``datasets``, text ``"p/q"`` of :class:`fractions.Fraction`;
every float is a dyadic rational, so the sum is exact): reading them is one
row whatever the ledger's length, and converting to float rounds once, as
:func:`math.fsum` would.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import sqlite3
import threading
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, cast

from .accounting import Budget

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .ledger import Spend, _Row

__all__ = ["SqliteStore", "SCHEMA_VERSION"]

#: The schema version this dpexplorer writes and reads (``PRAGMA user_version``).
SCHEMA_VERSION = 1

_SCHEMA = (
    """CREATE TABLE datasets (
    name TEXT PRIMARY KEY,
    budget_kind TEXT CHECK (budget_kind IN ('pure', 'approx', 'zcdp')),
    budget_epsilon REAL, budget_delta REAL, budget_rho REAL,
    spent_epsilon TEXT NOT NULL DEFAULT '0', spent_delta TEXT NOT NULL DEFAULT '0',
    spent_rho TEXT NOT NULL DEFAULT '0',
    created TEXT NOT NULL)""",
    """CREATE TABLE log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(name),
    kind TEXT NOT NULL CHECK (kind IN ('spend', 'reservation', 'stage')),
    parent INTEGER REFERENCES log(id),
    label TEXT NOT NULL, mode TEXT NOT NULL, time TEXT NOT NULL,
    epsilon REAL NOT NULL CHECK (epsilon >= 0), delta REAL NOT NULL CHECK (delta >= 0),
    rho REAL NOT NULL CHECK (rho >= 0),
    reserved_epsilon REAL, reserved_delta REAL, reserved_rho REAL,
    state TEXT NOT NULL, noise TEXT NOT NULL DEFAULT '', queries INTEGER NOT NULL DEFAULT 0,
    sensitivity REAL)""",
    "CREATE INDEX log_top ON log(dataset, parent)",
    """CREATE TRIGGER log_no_delete BEFORE DELETE ON log
    BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END""",
    """CREATE TRIGGER log_settle_only BEFORE UPDATE ON log
    WHEN OLD.kind != 'reservation' OR OLD.state != 'open' OR NEW.epsilon > OLD.epsilon
         OR NEW.delta > OLD.delta OR NEW.rho > OLD.rho OR NEW.id != OLD.id
         OR NEW.dataset != OLD.dataset OR NEW.kind != OLD.kind OR NEW.label != OLD.label
         OR NEW.time != OLD.time
    BEGIN SELECT RAISE(ABORT, 'a ledger row is only changed by settling an open reservation down'); END""",
)

_COLUMNS = ("id, kind, parent, label, mode, epsilon, delta, rho, time, noise, queries, sensitivity, "
            "reserved_epsilon, reserved_delta, reserved_rho, state")


def _float(v: float | None) -> float:
    return math.nan if v is None else float(v)


class SqliteStore:
    """The log of one dataset in a SQLite ledger file (used through :class:`PrivacyLedger`).

    Parameters
    ----------
    path : str or os.PathLike
        The file (created with the schema if missing or empty).
    dataset : str
        The dataset's key.

    Raises
    ------
    ValueError
        If the file is not a SQLite database, holds other tables, or has a
        schema version other than :data:`SCHEMA_VERSION`; if ``dataset`` is empty.
    """

    persistent: Literal[True] = True

    def __init__(self, path: str | os.PathLike[str], dataset: str):
        if not isinstance(dataset, str) or not dataset.strip():
            raise ValueError(f"dataset must be a non-empty string naming the dataset, got {dataset!r}")
        self.path = Path(path)
        self.dataset = dataset
        self._local = threading.local()
        self._depth = 0
        self._conn_pid: tuple[sqlite3.Connection, int] | None = None
        conn = self._conn()
        self._begin(conn)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if tables:
                    raise ValueError(f"{str(self.path)!r} is a SQLite file with other tables, not a "
                                     "dpexplorer ledger store; give a new file")
                for stmt in _SCHEMA:
                    conn.execute(stmt)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            elif version != SCHEMA_VERSION:
                raise ValueError(
                    f"the ledger store {str(self.path)!r} has schema version {version}; this dpexplorer "
                    f"reads version {SCHEMA_VERSION} only (a newer dpexplorer wrote it, or the file is "
                    "not a ledger store): open it with the dpexplorer version that wrote it")
            conn.execute("INSERT OR IGNORE INTO datasets(name, created) VALUES (?, ?)",
                         (dataset, _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # ---------------------------------------------------------- connection
    def _conn(self) -> sqlite3.Connection:
        """This process's connection (a forked child opens its own; the parent's is never used)."""
        pid = os.getpid()
        if self._conn_pid is None or self._conn_pid[1] != pid:
            try:
                conn = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
                conn.execute("PRAGMA foreign_keys = ON")
            except sqlite3.DatabaseError as exc:
                raise ValueError(f"{str(self.path)!r} is not a dpexplorer ledger store (SQLite: {exc})") from None
            self._conn_pid = (conn, pid)
            self._depth = 0
        return self._conn_pid[0]

    @staticmethod
    def _begin(conn: sqlite3.Connection, write: bool = True) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"the ledger store cannot be written: {exc}") from None

    def transaction(self, write: bool = True) -> _Transaction:
        """``with store.transaction():`` one ``BEGIN IMMEDIATE`` ... ``COMMIT`` (re-entrant; the caller
        holds the ledger's lock); ``write=False``: a read-only snapshot (``BEGIN DEFERRED``)."""
        return _Transaction(self, write)

    def close(self) -> None:
        """Close this process's connection (reopened on next use)."""
        if self._conn_pid is not None and self._conn_pid[1] == os.getpid():
            self._conn_pid[0].close()
        self._conn_pid = None

    # ------------------------------------------------------------- queries
    def _spent(self) -> list[Fraction | float]:
        row = self._conn().execute("SELECT spent_epsilon, spent_delta, spent_rho FROM datasets WHERE name = ?",
                                   (self.dataset,)).fetchone()
        return [_exact(v) for v in row]

    def _put_spent(self, values: Iterable[Fraction | float]) -> None:
        self._conn().execute("UPDATE datasets SET spent_epsilon = ?, spent_delta = ?, spent_rho = ? "
                             "WHERE name = ?", (*(str(v) for v in values), self.dataset))

    def _add_spent(self, change: Iterable[Fraction | float]) -> None:
        """Inside a transaction: add ``change`` (three floats or Fractions) to the exact totals.

        An infinite cost (ρ = ∞: an (ε, δ) step with no zCDP bound, such as
        partition selection) makes that total ``inf``.
        """
        self._put_spent([_plus(old, _exact(c)) for old, c in zip(self._spent(), change, strict=True)])

    def _recount(self) -> None:
        """Inside a transaction: the exact totals summed again over the dataset's top-level rows."""
        totals: list[Fraction | float] = [Fraction(0)] * 3
        for row in self._conn().execute("SELECT epsilon, delta, rho FROM log WHERE dataset = ? AND "
                                        "parent IS NULL", (self.dataset,)):
            totals = [_plus(t, _exact(v)) for t, v in zip(totals, row, strict=True)]
        self._put_spent(totals)

    def totals(self) -> tuple[float, float, float]:
        """``(Σε, Σδ, Σρ)`` over the rows with no parent, correctly rounded from the exact sums
        (``inf`` where a row's cost is infinite)."""
        return cast("tuple[float, float, float]", tuple(float(v) for v in self._spent()))

    def get_budget(self) -> Budget | None:
        row = self._conn().execute("SELECT budget_kind, budget_epsilon, budget_delta, budget_rho FROM datasets "
                                   "WHERE name = ?", (self.dataset,)).fetchone()
        if row is None or row[0] is None:
            return None
        return Budget(row[0], epsilon=row[1], delta=row[2], rho=row[3])

    def put_budget(self, budget: Budget | None) -> None:
        b = budget
        values = (None, None, None, None) if b is None else (b.kind, b.epsilon, b.delta, b.rho)
        self._conn().execute("UPDATE datasets SET budget_kind = ?, budget_epsilon = ?, budget_delta = ?, "
                             "budget_rho = ? WHERE name = ?", (*values, self.dataset))

    def insert(self, row: _Row) -> int:
        res = row.reserved or (None, None, None)
        cur = self._conn().execute(
            "INSERT INTO log(dataset, kind, parent, label, mode, time, epsilon, delta, rho, reserved_epsilon, "
            "reserved_delta, reserved_rho, state, noise, queries, sensitivity) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (self.dataset, row.kind, row.parent, row.label, row.mode, row.time, row.epsilon, row.delta,
             row.rho, *res, row.state, row.noise, row.queries,
             None if math.isnan(row.sensitivity) else row.sensitivity))
        row.id = int(cast(int, cur.lastrowid))  # set after an INSERT
        if row.parent is None:
            self._add_spent((row.epsilon, row.delta, row.rho))
        return row.id

    def settle(self, row_id: int, cost: tuple[float, float, float], state: str) -> None:
        conn = self._conn()
        old = conn.execute("SELECT epsilon, delta, rho, parent FROM log WHERE id = ?", (row_id,)).fetchone()
        conn.execute("UPDATE log SET epsilon = ?, delta = ?, rho = ?, state = ? WHERE id = ?",
                     (*cost, state, row_id))
        if old[3] is None:
            if any(math.isinf(v) for v in (*cost, *old[:3])):
                self._recount()  # ∞ − ∞ has no meaning: sum the rows again
            else:
                self._add_spent([Fraction(c) - Fraction(o) for c, o in zip(cost, old[:3], strict=True)])

    def rows(self) -> list[_Row]:
        from .ledger import _Row

        out = []
        for r in self._conn().execute(f"SELECT {_COLUMNS} FROM log WHERE dataset = ? ORDER BY id",
                                      (self.dataset,)):
            reserved = None if r[12] is None else (r[12], r[13], r[14])
            out.append(_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], _float(r[11]),
                            reserved, r[15]))
        return out

    def entries(self) -> tuple[Spend, ...]:
        rows = self.rows()
        by_id = {r.id: r for r in rows}
        return tuple(r.spend("" if r.parent is None else f"#{r.parent} {by_id[r.parent].label}")
                     for r in rows if r.kind != "reservation")

    def count(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM log WHERE dataset = ? AND kind != 'reservation'",
                                        (self.dataset,)).fetchone()[0])


class _Transaction:
    def __init__(self, store: SqliteStore, write: bool) -> None:
        self.store = store
        self.write = write

    def __enter__(self) -> sqlite3.Connection:
        s = self.store
        conn = s._conn()
        if s._depth == 0:
            s._begin(conn, self.write)
        s._depth += 1
        return conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        s = self.store
        s._depth -= 1
        if s._depth == 0:
            conn = s._conn()
            conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
        return False


def _exact(value: str | float | Fraction) -> Fraction | float:
    """A stored total or cost as an exact rational, or ``math.inf`` (text ``"inf"`` or float ∞)."""
    if isinstance(value, str) and value == "inf" or isinstance(value, float) and math.isinf(value):
        if (isinstance(value, float) and value < 0):
            raise ValueError("a privacy cost cannot be -inf")
        return math.inf
    return Fraction(value)


def _plus(a: Fraction | float, b: Fraction | float) -> Fraction | float:
    """Exact sum; ``inf`` if either is."""
    return math.inf if math.isinf(a) or math.isinf(b) else a + b

