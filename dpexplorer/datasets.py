"""Data in: turn real data into a data vector ``x`` of counts.

A data vector is a 1D histogram (shape ``(n,)``) or a 2D grid (shape
``(n1, n2)``) of non-negative whole counts, returned as float64.  Sources:

* DPBench histograms (Hay et al., SIGMOD 2016), the data of the DAWA paper
  (Li et al. 2014, Sec. 5.1): :func:`fetch_dpbench` (downloads them once,
  checksummed, into a cache folder), :func:`list_dpbench`, :func:`load_dpbench`;
* user data: :func:`histogram`, :func:`histogram2d`, :func:`from_dataframe`,
  :func:`from_csv`, :func:`from_npy`;
* real tables bundled with ``bokeh-sampledata``: :func:`load_bundled`;
* numerical attributes with bucket values for sum queries (Superstore Sales
  and Profit, DPBench INCOME, a CSV column): :class:`NumericalAttribute`,
  :func:`load_numerical`, :func:`numerical_attribute`, :func:`bucket_values`.

Validation is loud: bad input raises ``ValueError`` saying what is wrong and
what is allowed; nothing is clipped, dropped or coerced silently.  Sizes are
checked before anything is allocated (:mod:`dpexplorer.queries.limits`): the
bytes of a CSV file (``upload_bytes``), the bins of a histogram (``bins``, all
axes multiplied) and the cells an ``.npy`` header declares (``cells``, read
from the header before the data).
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .privacy import validate_counts
from .queries import limits

PAPER_NAMES = {
    "ADULTFRANK.n4096": "ADULT", "HEPTH.n4096": "HEPTH", "INCOME.n4096": "INCOME",
    "MEDCOST.n4096": "MEDCOST", "NETTRACE.n4096": "NETTRACE",
    "PATENT.n4096": "PATENT", "SEARCHLOGS.n4096": "SEARCHLOGS",
}
DAWA_DATASETS = tuple(PAPER_NAMES.values())
DEFAULT_1D = "airports_elevation"
DEFAULT_2D = "us_cities_lonlat"
DEFAULT_TABLE = "superstore"


class UnknownDatasetError(ValueError, KeyError):
    """A dataset name that is not available (both a ValueError and a KeyError)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def check_counts(x, name: str = "x") -> np.ndarray:
    """Validate a data vector of counts and return it as float64.

    Parameters
    ----------
    x : array_like, shape (n,) or (n1, n2)
        Non-negative whole counts (int, or float with whole values).
    name : str
        Name used in error messages.

    Returns
    -------
    numpy.ndarray, float64, same shape
        A copy of ``x`` with the same values (units: counts).

    Raises
    ------
    ValueError
        If ``x`` is not numeric, not 1D/2D, empty, has NaN/inf, negative or
        non-integer entries, or integers too large to be exact in float64.
    """
    a = np.asarray(x)
    if a.dtype.kind in "biuf" and a.ndim not in (1, 2):
        raise ValueError(f"{name} must be 1D (n,) or 2D (n1, n2), got shape {a.shape}")
    return validate_counts(a, name)  # the privacy kernel's own check


def _values(values, name: str) -> np.ndarray:
    """A 1D sequence of finite numbers as float64, or ValueError."""
    a = np.asarray(values)
    if a.dtype.kind == "O" and all(v is None or isinstance(v, numbers.Real) for v in a.flat):
        a = np.array([np.nan if v is None else v for v in a.flat], dtype=np.float64)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1D sequence, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty; need at least one value to bin")
    a = a.astype(np.float64)
    bad = int((~np.isfinite(a)).sum())
    if bad:
        raise ValueError(f"{name} has {bad} NaN/inf value(s); "
                         "remove or impute them explicitly before binning")
    return a


def _bin_count(bins, name: str) -> int:
    """Number of bins asked for by ``bins`` (a count or edges), before any edge is computed."""
    if isinstance(bins, (bool, np.bool_)):
        raise ValueError(f"bins for {name} must be a whole number of bins or a sequence of edges, "
                         f"got {bins!r}")
    if isinstance(bins, (int, np.integer)):
        if bins < 1:
            raise ValueError(f"bins for {name} must be >= 1, got {bins}")
        return int(bins)
    return max(len(bins) - 1, 1) if hasattr(bins, "__len__") else 1


def _edges(a: np.ndarray, bins, range, name: str) -> np.ndarray:
    """Bin edges for values ``a`` (all of which must fall inside them)."""
    limits.check("bins", _bin_count(bins, name), f"bins for {name}")
    if isinstance(bins, (int, np.integer)):
        if range is None:
            return np.histogram_bin_edges(a, int(bins))
        try:
            lo, hi = (float(v) for v in range)
        except (TypeError, ValueError):
            raise ValueError(f"range for {name} must be (lo, hi), got {range!r}") from None
        if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise ValueError(f"range for {name} must be finite (lo, hi) with lo < hi, got {range}")
        edges = np.linspace(lo, hi, int(bins) + 1)
    else:
        if range is not None:
            raise ValueError("range cannot be combined with explicit bin edges")
        if isinstance(bins, (str, bytes, float)):
            raise ValueError(f"bins must be an int or a sequence of edges, got {bins!r}")
        try:
            edges = np.asarray(bins, dtype=np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"bin edges for {name} must be numbers, got {bins!r}") from None
        if edges.ndim != 1 or edges.size < 2 or not np.isfinite(edges).all():
            raise ValueError(f"bin edges for {name} must be >= 2 finite numbers, got {bins!r}")
        steps = np.diff(edges)
        if (steps <= 0).any():
            i = int(np.argmax(steps <= 0))
            raise ValueError(f"bin edges for {name} must be strictly increasing: "
                             f"edges[{i}] = {edges[i]} >= edges[{i + 1}] = {edges[i + 1]}")
    out = int(((a < edges[0]) | (a > edges[-1])).sum())
    if out:
        raise ValueError(f"{out} of the {name} fall outside the bin edges [{edges[0]}, {edges[-1]}]; "
                         "widen the range/edges or filter the data explicitly")
    return edges


def histogram(values, bins, range=None) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of a 1D numeric sequence (``numpy.histogram`` semantics).

    Parameters
    ----------
    values : array_like, shape (N,)
        Finite numbers (one per record).
    bins : int or sequence of float
        Number of equal-width bins (over ``range``, default the data's
        min..max), or strictly increasing edges, shape (n + 1,).  The last
        bin includes its right edge.
    range : (float, float), optional
        Lower and upper edge when ``bins`` is an int.

    Returns
    -------
    counts : numpy.ndarray, float64, shape (n,)
        Records per bin (counts); ``counts.sum() == N``.
    edges : numpy.ndarray, float64, shape (n + 1,)

    Raises
    ------
    ValueError
        Empty, non-numeric or NaN/inf values (with how many), bins < 1,
        non-increasing edges, or values outside the explicit edges/range.
    LimitExceededError
        For more bins than the ``bins`` limit.
    """
    a = _values(values, "values")
    edges = _edges(a, bins, range, "values")
    return np.histogram(a, edges)[0].astype(np.float64), edges


def histogram2d(x_values, y_values, bins, range=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2D histogram (grid) of paired records (``numpy.histogram2d`` semantics).

    Parameters
    ----------
    x_values, y_values : array_like, shape (N,)
        Finite numbers; record ``i`` is ``(x_values[i], y_values[i])``.
    bins : int or (bx, by)
        One int for both axes, or one entry per axis, each an int or a
        strictly increasing sequence of edges.
    range : ((xlo, xhi), (ylo, yhi)), optional
        Per-axis ranges for int bins (``None`` entries allowed).

    Returns
    -------
    grid : numpy.ndarray, float64, shape (n1, n2)
        Records per cell (counts); rows follow x, columns follow y.
    xedges : numpy.ndarray, shape (n1 + 1,)
    yedges : numpy.ndarray, shape (n2 + 1,)

    Raises
    ------
    ValueError
        As :func:`histogram` for each axis, or if the lengths differ.
    LimitExceededError
        If ``n1·n2`` is above the ``bins`` limit (checked before any edge is made).
    """
    x, y = _values(x_values, "x_values"), _values(y_values, "y_values")
    if x.size != y.size:
        raise ValueError(f"x_values and y_values must have equal length, got {x.size} and {y.size}")
    if not isinstance(bins, (int, np.integer, list, tuple, np.ndarray)):
        raise ValueError(f"bins must be an int, edges, or one entry per axis, got {bins!r}")
    if isinstance(bins, (int, np.integer)) or (len(bins) != 2 and np.ndim(bins[0]) == 0):
        bins = (bins, bins)  # same bins (count or edges) on both axes
    elif len(bins) != 2:
        raise ValueError(f"bins must give one entry per axis (2), got {len(bins)}")
    cells = _bin_count(bins[0], "x_values") * _bin_count(bins[1], "y_values")
    limits.check("bins", cells, "histogram2d: bins (n1·n2)")
    ranges = (None, None) if range is None else range
    xe, ye = _edges(x, bins[0], ranges[0], "x_values"), _edges(y, bins[1], ranges[1], "y_values")
    return np.histogram2d(x, y, bins=(xe, ye))[0].astype(np.float64), xe, ye


def from_dataframe(df: pd.DataFrame, column: str, bins, range=None) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of one numeric column of a DataFrame (one record per row).

    Parameters
    ----------
    df : pandas.DataFrame
    column : str
    bins, range : see :func:`histogram`.

    Returns
    -------
    counts : numpy.ndarray, float64, shape (n,)
        Rows per bin (counts), summing to ``len(df)``.
    edges : numpy.ndarray, float64, shape (n + 1,)

    Raises
    ------
    ValueError
        Missing column (naming the available ones), non-numeric column,
        missing values (saying how many), or as :func:`histogram`.
    TypeError
        If ``df`` is not a DataFrame.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}")
    return histogram(numeric_column(df, column), bins, range)


def numeric_column(df: pd.DataFrame, column: str) -> np.ndarray:
    """The values of a numeric column without missing values, shape ``(rows,)``, float64.

    Raises
    ------
    ValueError
        If the column is absent (the available ones are listed), not numeric
        (booleans are refused), or has missing values (with how many):
        nothing is dropped or imputed silently.
    """
    if column not in df.columns:
        raise ValueError(f"column {column!r} not found; available columns: {list(df.columns)}")
    if len(df) == 0:
        raise ValueError(f"the table is empty: column {column!r} has no rows")
    s = df[column]
    if not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
        raise ValueError(f"column {column!r} must be numeric, got dtype {s.dtype}")
    missing = int(s.isna().sum())
    if missing:
        raise ValueError(f"column {column!r} has {missing} missing (NaN) value(s); "
                         "drop or impute them explicitly first")
    return s.to_numpy(dtype=np.float64)


def from_csv(path_or_buffer, column: str, bins, range=None) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of one numeric column of a CSV file, read with ``pandas.read_csv``.

    Parameters
    ----------
    path_or_buffer : str, path or file-like (e.g. ``io.StringIO``)
    column, bins, range : see :func:`from_dataframe`.

    Returns
    -------
    counts, edges : as :func:`from_dataframe`; counts sum to the number of rows.

    Raises
    ------
    ValueError
        As :func:`from_dataframe`, or if the file is empty, not UTF-8 text or
        not a CSV table (pandas' reason is given).
    LimitExceededError
        If the file is larger than the ``upload_bytes`` limit (checked before
        reading) or for more bins than the ``bins`` limit.
    """
    return from_dataframe(read_csv(path_or_buffer), column, bins, range)


def read_csv(path_or_buffer) -> pd.DataFrame:
    """``pandas.read_csv`` of a file or buffer within the ``upload_bytes`` limit, with clear errors.

    Raises
    ------
    ValueError
        If the file is empty, not UTF-8 text or not a CSV table.
    LimitExceededError
        If it is larger than the ``upload_bytes`` limit (checked before reading).
    """
    name = _source_name(path_or_buffer, "the CSV")
    size = _source_size(path_or_buffer)
    if size is not None:
        limits.check("upload_bytes", size, f"{name}: bytes")
    try:
        return pd.read_csv(path_or_buffer)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{name} is empty: a CSV needs a header row and data rows") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except pd.errors.ParserError as exc:
        raise ValueError(f"{name} is not a CSV table pandas can read: {str(exc).strip()}") from None


def _source_name(source, default: str) -> str:
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return str(getattr(source, "name", default))


def _source_size(source) -> int | None:
    """Bytes left to read in a path or a seekable buffer (``None`` when it cannot be told)."""
    if isinstance(source, (str, os.PathLike)):
        return os.stat(source).st_size
    try:
        here = source.tell()
        end = source.seek(0, os.SEEK_END)
        source.seek(here)
    except (AttributeError, OSError, ValueError):
        return None
    return end - here


def from_npy(path_or_buffer) -> np.ndarray:
    """Load a data vector from a ``.npy`` file (``numpy.load``, ``allow_pickle=False``).

    The header is read and checked first (:func:`npy_shape`), so a file that
    declares a huge array is refused before its data is read.

    Returns
    -------
    numpy.ndarray, float64, shape (n,) or (n1, n2)
        Counts.

    Raises
    ------
    ValueError
        If the file is not a valid ``.npy`` file (an ``.npz`` archive, a
        corrupt or truncated file, pickled objects), or as :func:`check_counts`.
    LimitExceededError
        If its header declares more cells than the ``cells`` limit.
    """
    return _load_npy(path_or_buffer, _source_name(path_or_buffer, "x"))


def npy_shape(path_or_buffer) -> tuple[int, ...]:
    """Shape declared by a ``.npy`` header, checked before any data is read.

    Parameters
    ----------
    path_or_buffer : str, path or binary file-like
        A seekable buffer is left where it was.

    Returns
    -------
    tuple of int

    Raises
    ------
    ValueError
        If the header is not a valid ``.npy`` header (the message names the
        file), declares pickled objects or a non-numeric type, or the file is
        shorter than its header says.
    LimitExceededError
        If the shape has more cells than the ``cells`` limit.
    """
    name = _source_name(path_or_buffer, "the .npy data")
    fmt = np.lib.format
    opened = isinstance(path_or_buffer, (str, os.PathLike))
    f = open(path_or_buffer, "rb") if opened else path_or_buffer
    try:
        start = None if opened else f.tell()
        try:
            version = fmt.read_magic(f)
            read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
            if read is None:
                raise ValueError(f"unsupported .npy format version {version}")
            shape, _, dtype = read(f)
        except (ValueError, EOFError, SyntaxError, TypeError) as exc:
            raise ValueError(f"{name}: not a valid .npy file ({exc})") from None
        if dtype.hasobject:
            raise ValueError(f"{name}: the .npy file holds pickled Python objects; only numeric arrays "
                             "of counts are read")
        if dtype.kind not in "biuf":
            raise ValueError(f"{name}: the .npy file must hold numeric counts, got dtype {dtype}")
        cells = math.prod(shape)
        limits.check("cells", cells, f"{name}: cells of the array of shape {tuple(shape)}")
        left = _source_size(f)
        if left is not None and left < cells * dtype.itemsize:
            raise ValueError(f"{name}: not a valid .npy file (truncated: its header declares shape "
                             f"{tuple(shape)}, {cells * dtype.itemsize:,} bytes of data, the file holds {left:,})")
        return tuple(int(v) for v in shape)
    finally:
        if opened:
            f.close()
        elif start is not None:
            f.seek(start)


def _load_npy(source, name: str) -> np.ndarray:
    """The counts of a ``.npy`` file or buffer, its header checked first; messages name ``name``."""
    npy_shape(source)
    try:
        arr = np.load(source, allow_pickle=False)
    except (ValueError, EOFError, OSError) as exc:
        raise ValueError(f"{name}: not a valid .npy file ({exc})") from None
    if not isinstance(arr, np.ndarray):  # pragma: no cover - npy_shape refuses archives
        raise ValueError("expected a single .npy array, got an .npz archive")
    return check_counts(arr, name=name)


# ---------------------------------------------------------------- DPBench
#: Where :func:`fetch_dpbench` downloads from: the DPBench/DPComp repository
#: (dpcomp-org/dpcomp_core on GitHub, folder ``dpcomp_core/datafiles``) pinned at
#: its newest commit, so the files never change under the checksums below.
DPBENCH_BASE_URL = ("https://raw.githubusercontent.com/dpcomp-org/dpcomp_core/"
                    "233cfcc380320860ab957003b7b6271e0c2027c1/dpcomp_core/datafiles/")


@dataclass(frozen=True)
class DPBenchFile:
    """One DPBench histogram: file, checksum, name in the papers and where its data come from."""

    path: str          # relative to the DPBench folder, e.g. "1D/HEPTH.n4096.npy"
    sha256: str
    paper_name: str
    description: str   # what a bin counts
    source: str        # the original data and its collector


_HAY = "prepared for DPBench (Hay et al., SIGMOD 2016)"
_LC = "Lending Club statistics on rejected loan applications"
#: Every file of the public DPBench release, with its SHA-256 checksum (of the
#: pinned :data:`DPBENCH_BASE_URL` commit).
DPBENCH_FILES: tuple[DPBenchFile, ...] = (
    DPBenchFile("1D/ADULTFRANK.n4096.npy",
                "d85d9b9fe1ff128820cd103f710200affee71859f721ccb9ecc6e020325e4705", "ADULT",
                "capital loss per person", f"UCI Adult census data; {_HAY}"),
    DPBenchFile("1D/HEPTH.n4096.npy",
                "a39f1283608ac1eae6d1d5bc289e6eb7a42687b765f5f80af1b40566ff853884", "HEPTH",
                "arXiv high-energy-physics citation network, citations per paper",
                f"arXiv HEP-TH citation graph, as used by the DAWA paper; {_HAY}"),
    DPBenchFile("1D/INCOME.n4096.npy",
                "2bdb4bb9625d836ad923b280d303860dd12034ef3ae0cf9658e834cb95d8a0c5", "INCOME",
                "personal income", f"IPUMS USA census microdata 2001-2011; {_HAY}"),
    DPBenchFile("1D/MEDCOST.n4096.npy",
                "98ac6a1fb0ccdb0e249a7df49a238145eb971fdbebe1ee805174f99d28ef0dd3", "MEDCOST",
                "personal medical expenses",
                f"2007 National Home and Hospice Care Survey; {_HAY}"),
    DPBenchFile("1D/NETTRACE.n4096.npy",
                "c402b04fa1f007431ef9f414e092064b44726b9a694c550eb446167fd0e670dd", "NETTRACE",
                "external connections per internal host",
                f"IP-level network trace at a university gateway (Hay et al. 2010); {_HAY}"),
    DPBenchFile("1D/PATENT.n4096.npy",
                "0dac5363cfc1e15189cf00ef3a817dcfeb39678d986b1951ba4f451b1cc6f864", "PATENT",
                "citations per patent",
                f"NBER US patent citation data 1963-1999; {_HAY}"),
    DPBenchFile("1D/SEARCHLOGS.n4096.npy",
                "183561b0a8bd8a6cdd0622468830aaab491400a7ee58db2f46a4496e9a4e2621", "SEARCHLOGS",
                'frequency of the search term "Obama" over time, 2004-2010',
                f"search query logs (Hay et al. 2010); {_HAY}"),
    DPBenchFile("1D/bids.npy",
                "8a2074b437c1bbf5b35bd5d3ae5f26d5b30f94879e4bbd1ada01c4cd9c6fd319", "BIDS-ALL",
                "auction bids per IP address",
                f"Kaggle 'Human or Robot?' auction competition test data; {_HAY}"),
    DPBenchFile("1D/bids_j.npy",
                "2a68937117e0eb29930b69450516e1a8c3d95261c13faf820201decf51d67160", "BIDS-FJ",
                "jewelry auction bids per IP address",
                f"Kaggle 'Human or Robot?' auction competition test data; {_HAY}"),
    DPBenchFile("1D/bids_m.npy",
                "85dda7fb08249cee7adec96170db6ac89c3e439a851f42ef3e961c9551ac98bc", "BIDS-FM",
                "mobile-phone auction bids per IP address",
                f"Kaggle 'Human or Robot?' auction competition test data; {_HAY}"),
    DPBenchFile("1D/GrossCompenMDSalary1.npy",
                "129ddc0a21a7045283b1f933da5012786597ab1db54bada600d3c916ed4a981e", "MDSALARY",
                "year-to-date gross compensation",
                f"Maryland state employee salary database, 2012; {_HAY}"),
    DPBenchFile("1D/GrossCompenMDSalary2_filtered.npy",
                "a8dcfdbbc9e6da4a0d9a113d8747436d382be5333365259700e6c8c6e8673f65",
                "MDSALARY-FA", "year-to-date gross compensation of employees paid annually",
                f"Maryland state employee salary database, 2012; {_HAY}"),
    DPBenchFile("1D/RejectStats_0_4096_no_outliers.npy",
                "bb65736f630e2334742ae40b5fa07a14fdefb0dd5432d1162f9b09e117f1d583", "LC-REQ-ALL",
                "loan amount requested", f"{_LC}; {_HAY}"),
    DPBenchFile("1D/RejectStats_0_4096_no_outliers_filter_7_1.npy",
                "3578f8ec7a1660f65e1d3ce1a77efd8b1ed7346d2ceebcba42f49e57679e01b9", "LC-REQ-F1",
                "loan amount requested, applicants employed 0-5 years", f"{_LC}; {_HAY}"),
    DPBenchFile("1D/RejectStats_0_4096_no_outliers_filter_7_2.npy",
                "10e7e020ed49d722a6162aae47dca0cc90a214e496e1c5842358715791eba99a", "LC-REQ-F2",
                "loan amount requested, applicants employed 5-10 years", f"{_LC}; {_HAY}"),
    DPBenchFile("1D/RejectStats_4_4096_no_outliers.npy",
                "9aad58077334e29f9b757111fc11c447d55adef5073c25bfb6e1e9e6aada5f05", "LC-DTIR-ALL",
                "debt-to-income ratio", f"{_LC}; {_HAY}"),
    DPBenchFile("1D/RejectStats_4_4096_no_outliers_filter_7_1.npy",
                "7c4131515c63af0111468566f10b716740a61d0e4076603b8e2937ee16556b92", "LC-DTIR-F1",
                "debt-to-income ratio, applicants employed 0-5 years", f"{_LC}; {_HAY}"),
    DPBenchFile("1D/RejectStats_4_4096_no_outliers_filter_7_2.npy",
                "89c0b8890c70a4d75a05de62b63b8e69c595bc8f9ca5c26f7d1b8378b8c46fb8", "LC-DTIR-F2",
                "debt-to-income ratio, applicants employed 5-10 years", f"{_LC}; {_HAY}"),
    DPBenchFile("2D/Adult_2D_256_256.npy",
                "dba1dc271efca6d3ee6539b4c130348ae86883d19053a58e2c3a7603f9c7235d", "ADULT-2D",
                "capital gain × capital loss", f"UCI Adult census data; {_HAY}"),
    DPBenchFile("2D/BeijingTaxiE_256_256.npy",
                "c2442ea859cbbbf459bf0d88ba92d661aac77c1acff489554b26ac1255240ea7", "BJ-CABS-E",
                "taxi trip end locations (GPS)",
                f"GPS trajectories of 8,602 Beijing taxis, May 2009; {_HAY}"),
    DPBenchFile("2D/BeijingTaxiS_256_256.npy",
                "ed55a0df58592e526477880b54e9cf4ea7c73796f4ec293b8bfc6a272440a2cc", "BJ-CABS-S",
                "taxi trip start locations (GPS)",
                f"GPS trajectories of 8,602 Beijing taxis, May 2009; {_HAY}"),
    DPBenchFile("2D/Loan_2D_256_256.npy",
                "e362b40fbbd12d20f9f9469d9308111c1c86864e0ce38180d1cbd8e972b03a65", "LC-2D",
                "funded amount × annual income", f"Lending Club loan statistics; {_HAY}"),
    DPBenchFile("2D/MDSalary2D_256_256.npy",
                "344637bdd6b36894185ba3e1270873cb1988569026d6f79513bbb0ce3f419ca7", "MD-SAL-2D",
                "annual salary × overtime earnings",
                f"Maryland state employee salary database, 2012; {_HAY}"),
    DPBenchFile("2D/Stroke_2D_256_256.npy",
                "f9578a946913476953dc44a39a7a3247d9cfeaa534430d0e878e932b131a5490", "STROKE",
                "age × systolic blood pressure", f"International Stroke Trial database; {_HAY}"),
    DPBenchFile("2D/cabspottingE_256_256.npy",
                "f50355d6a2c238e35386bcae17ee6a9760fad1eabed60748a225922d10635e38", "SF-CABS-E",
                "taxi trace end locations",
                f"San Francisco taxi mobility traces (CRAWDAD epfl/mobility); {_HAY}"),
    DPBenchFile("2D/cabspottingS_256_256.npy",
                "70b5c25fbd019b020b441ae1a3f7b9633e8eab678fe6a3301da10f2d5c6e3d70", "SF-CABS-S",
                "taxi trace start locations",
                f"San Francisco taxi mobility traces (CRAWDAD epfl/mobility); {_HAY}"),
    DPBenchFile("2D/checkin_256_256.npy",
                "dc69bea21e80f50672f2d94da6dca598de37223dd9c27eba84462ee074abee2c", "GOWALLA",
                "check-in locations", f"Gowalla location check-ins (SNAP); {_HAY}"),
    DPBenchFile("2D/twitter_256_256.npy",
                "53112f29267039617756542e9ab811e7817473a4e547c027b7ef2c2169e0b2d4", "TWITTER",
                "tweet locations in the western USA", f"geotagged tweets; {_HAY}"),
)
_DPBENCH_BY_STEM = {Path(f.path).name[:-len(".npy")]: f for f in DPBENCH_FILES}


def dpbench_cache_dir() -> Path:
    """The folder :func:`fetch_dpbench` downloads into by default.

    ``$DPEXPLORER_DPBENCH`` if set, else the user's cache folder
    (``pooch.os_cache("dpexplorer") / "dpbench"``, e.g. ``~/.cache/dpexplorer/dpbench``
    on Linux).
    """
    env = os.environ.get("DPEXPLORER_DPBENCH")
    if env:
        return Path(env)
    import pooch

    return Path(pooch.os_cache("dpexplorer")) / "dpbench"


def fetch_dpbench(directory=None, names=None, *, base_url: str = DPBENCH_BASE_URL,
                  downloader=None, progress: bool = False) -> Path:
    """Download the public DPBench histograms once, checksummed, and return their folder.

    Files already in the folder with the right SHA-256 are not downloaded
    again (nothing at all is downloaded when every file is there, so a local
    copy works offline); a download whose checksum does not match is
    refused.  Uses :func:`pooch.create` / ``Pooch.fetch``.

    Parameters
    ----------
    directory : str or path, optional
        Where the ``1D/`` and ``2D/`` files go; default :func:`dpbench_cache_dir`.
    names : iterable of str, optional
        File stems or paper names (case-insensitive) to fetch; default all
        :data:`DPBENCH_FILES`.
    base_url : str
        Where the ``1D/...`` and ``2D/...`` paths are downloaded from
        (default :data:`DPBENCH_BASE_URL`; any HTTP(S)/FTP mirror).
    downloader : callable, optional
        A pooch downloader ``downloader(url, output_file, pooch)``.
    progress : bool
        Show download progress bars (needs ``tqdm``).

    Returns
    -------
    pathlib.Path
        The folder, ready for :func:`list_dpbench` and :func:`load_dpbench`.

    Raises
    ------
    UnknownDatasetError
        For a name that is not a DPBench file.
    ValueError
        If a downloaded file's checksum does not match (the file is not kept).
    OSError, requests.exceptions.RequestException
        If a download fails (e.g. no network).
    """
    import pooch

    folder = dpbench_cache_dir() if directory is None else Path(directory)
    wanted = DPBENCH_FILES if names is None else tuple(_dpbench_file(n) for n in names)
    fetcher = pooch.create(path=folder, base_url=base_url,
                           registry={f.path: f"sha256:{f.sha256}" for f in DPBENCH_FILES})
    for f in wanted:
        fetcher.fetch(f.path, downloader=downloader, progressbar=progress)
    return folder


def _dpbench_file(name) -> DPBenchFile:
    key = str(name).lower()
    for stem, f in _DPBENCH_BY_STEM.items():
        if key in (stem.lower(), f.paper_name.lower()):
            return f
    raise UnknownDatasetError(f"unknown DPBench dataset {name!r}; available: "
                              f"{sorted(f.paper_name for f in DPBENCH_FILES)}")


def _checkout_dpbench() -> Path:
    """A development checkout's copy of the histograms, next to the repository."""
    return (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "dpbench").resolve()


def default_dpbench_dir() -> Path | None:
    """Where the DPBench histograms live.

    Returns
    -------
    pathlib.Path or None
        ``$DPEXPLORER_DPBENCH`` if set; else a development checkout's copy
        (the ``shared/data/dpbench`` folder next to the repository) if it
        exists; else the download cache of :func:`fetch_dpbench` if it holds
        files; else None (call :func:`fetch_dpbench`).
    """
    env = os.environ.get("DPEXPLORER_DPBENCH")
    if env:
        return Path(env)
    p = _checkout_dpbench()
    if p.is_dir():
        return p
    try:
        cache = dpbench_cache_dir()
    except ImportError:  # pragma: no cover - pooch is a dependency
        return None
    return cache if any(cache.glob("[12]D/*.npy")) else None


def _dpbench_dir(directory) -> Path:
    d = default_dpbench_dir() if directory is None else Path(directory)
    if d is None or not d.is_dir():
        raise FileNotFoundError(f"DPBench directory {d} not found; download the histograms with "
                                "dpx.datasets.fetch_dpbench(), pass the folder holding 1D/ and "
                                "2D/ .npy files, or set DPEXPLORER_DPBENCH")
    return d


def list_dpbench(directory=None) -> pd.DataFrame:
    """List the DPBench histograms (Hay et al. 2016) under ``directory/{1D,2D}``.

    Parameters
    ----------
    directory : str or path, optional
        Default :func:`default_dpbench_dir`.

    Returns
    -------
    pandas.DataFrame
        One row per ``.npy`` file: ``name`` (file stem), ``paper_name`` (DAWA
        name, else the stem), ``dims`` (1 or 2), ``shape`` (e.g. ``(4096,)``,
        ``(256, 256)``), ``path``, ``description`` (what a bin counts),
        ``source`` (where the data come from; "" for files that are not part
        of DPBench) and ``error``: ``None``, or why the file cannot be loaded
        (its header is not a valid ``.npy`` header, declares more cells than
        the ``cells`` limit, ...; ``shape`` is then ``None``).  One bad file
        does not hide the others.

    Raises
    ------
    FileNotFoundError
        If the directory does not exist.
    """
    d = _dpbench_dir(directory)
    rows = []
    for dims in (1, 2):
        for f in sorted((d / f"{dims}D").glob("*.npy")):
            try:
                shape, error = npy_shape(f), None
            except (ValueError, OSError) as exc:
                shape, error = None, str(exc)
            known = _DPBENCH_BY_STEM.get(f.stem)
            rows.append(dict(name=f.stem, paper_name=PAPER_NAMES.get(f.stem, f.stem), dims=dims,
                             shape=shape, path=f, description=known.description if known else "",
                             source=known.source if known else "", error=error))
    table = pd.DataFrame(rows, columns=["name", "paper_name", "dims", "shape", "path",
                                        "description", "source", "error"])
    table["error"] = table["error"].astype(object).where(table["error"].notna(), None)
    return table


def load_dpbench(name: str, directory=None) -> np.ndarray:
    """Load one DPBench histogram (Hay et al. 2016; DAWA Sec. 5.1).

    Parameters
    ----------
    name : str
        File stem (``"ADULTFRANK.n4096"``, ``"Adult_2D_256_256"``) or DAWA
        paper name (``"ADULT"``); case-insensitive, 1D searched before 2D.
    directory : str or path, optional
        Default :func:`default_dpbench_dir`.

    Returns
    -------
    numpy.ndarray, float64, shape (4096,) or (256, 256)
        Counts.

    Raises
    ------
    UnknownDatasetError
        (a ValueError and KeyError) listing the available names.
    FileNotFoundError
        If the directory does not exist.
    ValueError
        For a file that is not a valid ``.npy`` file (naming it), or from
        :func:`check_counts` for invalid contents.
    LimitExceededError
        If its header declares more cells than the ``cells`` limit.
    """
    table = list_dpbench(directory)
    key = str(name).lower()
    for col in ("name", "paper_name"):
        hit = table[table[col].str.lower() == key]
        if len(hit):
            return _load_npy(hit["path"].iloc[0], name=f"{name} ({hit['path'].iloc[0]})")
    raise UnknownDatasetError(f"unknown DPBench dataset {name!r}; available: "
                              f"{sorted(set(table['paper_name']) | set(table['name']))}")


# ---------------------------------------------------------------- bundled
@dataclass(eq=False)
class Dataset:
    """A named data vector with its provenance.

    ``x`` holds float64 counts, shape (n,) or (n1, n2); ``edges`` has one
    edge array per dimension (in the attribute's units); ``attributes`` names the binned attributes;
    ``n_records`` is the number of records binned (``x.sum()``); ``frame``
    is the source table for multi-attribute datasets; ``source`` says where
    the data come from (collector and package), "" if unknown.
    """

    name: str
    x: np.ndarray
    edges: tuple[np.ndarray, ...]
    attributes: tuple[str, ...]
    description: str
    n_records: int
    frame: pd.DataFrame | None = None
    source: str = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.x.shape


def _airports_elevation() -> Dataset:
    from bokeh.sampledata.airport_routes import airports
    # 256 bins of 36 ft over a fixed, data-independent domain [-128, 9088] ft.
    x, e = from_dataframe(airports, "Altitude", 256, range=(-128.0, 9088.0))
    return Dataset("airports_elevation", x, (e,), ("elevation_ft",),
                   "Elevation (ft) of 514 US airports (OurAirports, via bokeh-sampledata "
                   "airport_routes); 256 bins of 36 ft over [-128, 9088]", len(airports),
                   source=BUNDLED_SOURCES["airports_elevation"])


def _us_cities_lonlat() -> Dataset:
    from bokeh.sampledata.us_cities import data
    lon, lat = np.asarray(data["lon"], dtype=float), np.asarray(data["lat"], dtype=float)
    # Contiguous US only: cities in Alaska, Hawaii and territories are excluded.
    box = ((-125.0, -66.0), (24.0, 50.0))
    keep = (lon >= box[0][0]) & (lon <= box[0][1]) & (lat >= box[1][0]) & (lat <= box[1][1])
    x, xe, ye = histogram2d(lon[keep], lat[keep], 64, range=box)
    return Dataset("us_cities_lonlat", x, (xe, ye), ("lon", "lat"),
                   "US cities >5000 residents (GeoNames, via bokeh-sampledata us_cities), "
                   "contiguous US, 64x64 longitude x latitude over [-125,-66] x [24,50] deg",
                   int(keep.sum()), source=BUNDLED_SOURCES["us_cities_lonlat"])


def _superstore() -> Dataset:
    from bokeh.sampledata.sample_superstore import data
    frame = data.copy()
    # Sales in USD, 256 bins of 90 USD over the fixed domain [0, 23040].
    x, e = from_dataframe(frame, "Sales", 256, range=SUPERSTORE_SALES_RANGE)
    return Dataset("superstore", x, (e,), ("Sales",),
                   "9994 Tableau Sample Superstore orders (bokeh-sampledata sample_superstore); "
                   "Sales (USD) in 256 bins of 90 USD over [0, 23040]", len(frame), frame,
                   source=BUNDLED_SOURCES["superstore"])


#: Where every bundled dataset comes from (shown in the app's dataset list).
BUNDLED_SOURCES = {
    "airports_elevation": "OurAirports, via the bokeh-sampledata package (airport_routes)",
    "us_cities_lonlat": "GeoNames cities of more than 5,000 people, via the bokeh-sampledata "
                        "package (us_cities)",
    "superstore": "Tableau's Sample Superstore, via the bokeh-sampledata package "
                  "(sample_superstore)",
}

#: Where the data of an upload come from (``filename``: the file's name as uploaded).
UPLOAD_SOURCE = "your upload ({filename}), held in this session only"


def dpbench_source(name: str) -> str:
    """Where a DPBench histogram comes from, in words (for the app's dataset lists).

    Parameters
    ----------
    name : str
        File stem (``"ADULTFRANK.n4096"``) or DAWA paper name (``"ADULT"``),
        case-insensitive.

    Returns
    -------
    str
        "DPBench histogram ADULT: UCI Adult census data; prepared for DPBench
        (Hay et al., SIGMOD 2016)" for a file of the public release
        (:data:`DPBENCH_FILES`); for another file of a DPBench folder, that
        its origin is not known.
    """
    key = str(name).lower()
    for f in DPBENCH_FILES:
        if key in (Path(f.path).name[:-len(".npy")].lower(), f.paper_name.lower()):
            return f"DPBench histogram {f.paper_name}: {f.source}"
    return (f"DPBench folder file {name}: not part of the public DPBench release "
            "(Hay et al., SIGMOD 2016), so its origin is not known")


def upload_source(filename: str) -> str:
    """:data:`UPLOAD_SOURCE` for an uploaded file."""
    return UPLOAD_SOURCE.format(filename=filename)


_BUNDLED: dict[str, Callable[[], Dataset]] = {
    "airports_elevation": _airports_elevation,   # (256,), 514 airports
    "us_cities_lonlat": _us_cities_lonlat,       # (64, 64), 37281 cities
    "superstore": _superstore,                   # (256,), 9994 orders + table
}


def bundled() -> dict[str, Callable[[], Dataset]]:
    """Registry of real datasets bundled with ``bokeh-sampledata``.

    Returns
    -------
    dict[str, callable]
        Name -> loader returning a :class:`Dataset`: ``airports_elevation``
        (256,), ``us_cities_lonlat`` (64, 64), ``superstore`` (256,) + table.
    """
    return dict(_BUNDLED)


def list_bundled() -> pd.DataFrame:
    """The bundled datasets and where they come from, without loading them.

    Returns
    -------
    pandas.DataFrame
        Columns ``name`` and ``source``, one row per :func:`bundled` dataset.
    """
    return pd.DataFrame({"name": list(_BUNDLED), "source": [BUNDLED_SOURCES[k] for k in _BUNDLED]})


def load_bundled(name: str) -> Dataset:
    """Load a bundled dataset by name (see :func:`bundled`).

    Returns
    -------
    Dataset
        ``x`` float64 counts with ``x.sum() == n_records``.

    Raises
    ------
    UnknownDatasetError
        (a ValueError) for an unknown name, listing the available ones.
    ImportError
        If ``bokeh-sampledata`` is not installed.
    """
    if name not in _BUNDLED:
        raise UnknownDatasetError(f"unknown bundled dataset {name!r}; available: {sorted(_BUNDLED)}")
    try:
        return _BUNDLED[name]()
    except ModuleNotFoundError as exc:
        raise ImportError(f"bundled dataset {name!r} needs bokeh-sampledata "
                          "(pip install bokeh-sampledata)") from exc


# ================================================================ numerical attributes
# Sum queries (Wu, Pujol, Kotsogiannis, Machanavajjhala 2019, Sec. 2 "Data
# Representation"; ``dpexplorer/docs/sums.md``) need, besides the counts x of the
# vector form, the *value* v_j of every bucket: the answer of a sum query is
# W·diag(v)·x.  A NumericalAttribute is that pair (x, edges) plus provenance.

#: How a bucket's value is read off its edges ``[lo_j, hi_j)``: ``"upper"`` (default, this
#: package's choice, ``dpexplorer/docs/sums.md``: every record is counted at its bucket's
#: upper edge, so vector-form sums bound the raw sums from above and a prefix query "value ≤ t"
#: at a bucket edge t contains
#: exactly the buckets whose value is ≤ t), ``"midpoint"`` or ``"lower"``.
BUCKET_VALUE_KINDS = ("upper", "midpoint", "lower")

#: Bucketing methods of :func:`bucket_edges`.
BUCKETINGS = ("equal_width", "quantile")

#: Superstore's fixed, data-independent domains (USD): every Sales value lies in
#: [0, 23040] (max 22638.48), every Profit value in [-6600, 8400] (min -6599.98, max 8399.98).
SUPERSTORE_SALES_RANGE = (0.0, 23040.0)
SUPERSTORE_PROFIT_RANGE = (-6600.0, 8400.0)


def bucket_values(edges, kind: str = "upper") -> np.ndarray:
    """The value ``v_j`` of every bucket ``[edges[j], edges[j+1])``, shape ``(n,)``.

    Parameters
    ----------
    edges : array_like, shape (n + 1,)
        Strictly increasing finite bucket edges (attribute units).
    kind : {"upper", "midpoint", "lower"}
        ``"upper"`` (default; this package's choice, see
        ``dpexplorer/docs/sums.md``): ``v_j = edges[j+1]``, so a record's vector-form value is
        never below its raw value and sums in
        the vector form are upper bounds of the raw sums; ``"midpoint"``:
        ``(edges[j] + edges[j+1]) / 2``; ``"lower"``: ``edges[j]``.  All three
        are public (functions of the public edges); the bucket *mean* of the
        data is not, so it is not offered.

    Returns
    -------
    ndarray, float64, shape (n,)
        Bucket values, in the attribute's units.

    Raises
    ------
    ValueError
        If ``kind`` is unknown or the edges are not >= 2 strictly increasing finite numbers.
    """
    if kind not in BUCKET_VALUE_KINDS:
        raise ValueError(f"bucket value kind must be one of {BUCKET_VALUE_KINDS}, got {kind!r}")
    e = _check_edges(edges)
    if kind == "upper":
        return e[1:].copy()
    if kind == "lower":
        return e[:-1].copy()
    return 0.5 * (e[:-1] + e[1:])


def _check_edges(edges, name: str = "bucket edges") -> np.ndarray:
    try:
        e = np.asarray(edges, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers, got {edges!r}") from None
    if e.ndim != 1 or e.size < 2:
        raise ValueError(f"{name} must be a 1D sequence of at least 2 numbers, got shape {e.shape}")
    if not np.isfinite(e).all():
        raise ValueError(f"{name} must be finite (found NaN or inf)")
    steps = np.diff(e)
    if (steps <= 0).any():
        i = int(np.argmax(steps <= 0))
        raise ValueError(f"{name} must be strictly increasing (no empty, zero-width buckets): "
                         f"edges[{i}] = {e[i]:g} >= edges[{i + 1}] = {e[i + 1]:g}")
    return e


def bucket_edges(values, bins, method: str = "equal_width", range=None) -> np.ndarray:
    """Bucket edges for a numerical attribute: equal-width, quantile or user-given.

    Parameters
    ----------
    values : array_like, shape (N,)
        One finite value per record (attribute units).
    bins : int or sequence of float
        Number of buckets ``n``, or the edges themselves (shape ``(n + 1,)``,
        strictly increasing), in which case ``method`` is ignored.
    method : {"equal_width", "quantile"}
        ``"equal_width"``: ``n`` buckets of equal width over ``range`` (default
        the data's min..max, which is *not* private: pass a public range for a
        private pipeline).  ``"quantile"``: edges at the ``k/n`` quantiles of
        the data, so buckets hold about equally many records -- the edges
        depend on the data and are **not differentially private**; use on
        public data or for exploration only.
    range : (float, float), optional
        Lower and upper edge for ``"equal_width"``.

    Returns
    -------
    ndarray, float64, shape (n + 1,)
        Strictly increasing edges covering every value.

    Raises
    ------
    ValueError
        NaN/inf or empty values, ``bins < 1``, an unknown method, values
        outside the range/edges, or quantile edges that coincide (some buckets
        would be empty, of zero width: ask for fewer buckets).
    """
    a = _values(values, "values")
    if method not in BUCKETINGS:
        raise ValueError(f"bucketing method must be one of {BUCKETINGS} (or pass edges), got {method!r}")
    if method == "quantile" and _counted(bins):
        if range is not None:
            raise ValueError("range applies to equal-width buckets only, not to quantile buckets")
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        limits.check("bins", int(bins), "quantile bins")
        e = np.quantile(a, np.linspace(0.0, 1.0, int(bins) + 1))
        dup = int((np.diff(e) <= 0).sum())
        if dup:
            raise ValueError(f"{dup} of {int(bins)} quantile buckets would be empty (zero width: the data "
                             f"has repeated values); ask for fewer buckets or use equal-width buckets")
        return e
    return _edges(a, bins, range, "values")


@dataclass(eq=False)
class NumericalAttribute:
    """A numerical attribute in vector form: records per bucket and the bucket edges.

    Attributes
    ----------
    name : str
    x : ndarray, float64, shape (n,)
        Records per bucket (counts) -- the private data vector of the sum
        mechanisms (:mod:`dpexplorer.sums`).
    edges : ndarray, float64, shape (n + 1,)
        Bucket edges (attribute units); bucket ``j`` is ``[edges[j], edges[j+1])``
        (the last one closed).
    unit : str
        Unit of the values (e.g. ``"USD"``, ``"bin"``).
    description : str
        Provenance and bucketing.
    n_records : int
        ``x.sum()``.
    records : ndarray or None, shape (N,)
        Raw values, kept for public sample data only (to measure the
        discretisation of the vector form); ``None`` for histograms.
    shift : float
        Constant added to every raw value before bucketing (0 unless the
        attribute had negative values and a shift was asked for explicitly).
    private_edges : bool
        Whether the edges were computed from the data (quantile buckets or the
        data's min..max): such edges are not covered by any DP guarantee.
    """

    name: str
    x: np.ndarray
    edges: np.ndarray
    unit: str
    description: str
    n_records: int
    records: np.ndarray | None = None
    shift: float = 0.0
    private_edges: bool = False

    @property
    def n(self) -> int:
        """Number of buckets."""
        return int(self.x.size)

    def bucket_values(self, kind: str = "upper") -> np.ndarray:
        """``v_j`` of every bucket, shape ``(n,)``; see :func:`bucket_values`."""
        return bucket_values(self.edges, kind)

    @property
    def has_negative_values(self) -> bool:
        """Whether some bucket lies (partly) below 0 (sum mechanisms refuse such attributes)."""
        return bool(self.edges[0] < 0)

    def raw_sum(self, upto: float | None = None) -> float:
        """Sum of the raw (shifted) values ``≤ upto`` (all if ``None``); NaN without records."""
        if self.records is None:
            return math.nan
        r = self.records if upto is None else self.records[self.records <= upto]
        return float(r.sum())


def numerical_attribute(values, bins, method: str = "equal_width", range=None, *, name: str = "values",
                        unit: str = "", description: str = "", shift: float = 0.0,
                        keep_records: bool = True) -> NumericalAttribute:
    """Bucket one numerical value per record into a :class:`NumericalAttribute`.

    Parameters
    ----------
    values : array_like, shape (N,)
        Finite numbers (one per record); NaN/inf raise (nothing is dropped silently).
    bins, method, range
        See :func:`bucket_edges`.  With a ``shift``, ``range`` and explicit
        edges are given in the *shifted* units.
    name, unit, description : str
        Provenance shown in the app.
    shift : float
        Added to every value before bucketing, e.g. ``-min`` of a public
        lower bound so that an attribute with negative values (Superstore
        Profit) becomes non-negative; sums of shifted values are
        ``sum + shift·count``.  Stated in the description.
    keep_records : bool
        Keep the raw (shifted) values in ``records`` (public data only).

    Returns
    -------
    NumericalAttribute

    Raises
    ------
    ValueError
        As :func:`bucket_edges`, or for a non-finite shift.
    """
    a = _values(values, "values")
    if not math.isfinite(float(shift)):
        raise ValueError(f"shift must be a finite number, got {shift!r}")
    a = a + float(shift)
    edges = bucket_edges(a, bins, method, range)
    explicit = not _counted(bins)
    private_edges = (not explicit) and (method == "quantile" or range is None)
    x = np.histogram(a, edges)[0].astype(np.float64)
    how = ("user edges" if explicit else
           f"{len(edges) - 1} {method.replace('_', '-')} buckets over [{edges[0]:g}, {edges[-1]:g}]")
    text = description or f"{a.size:,} records of {name}"
    if shift:
        text += f"; every value shifted by {float(shift):+g}"
    text += f"; {how}"
    if private_edges:
        text += " (edges computed from the data: NOT private)"
    return NumericalAttribute(name=name, x=x, edges=edges, unit=unit, description=text,
                              n_records=int(a.size), records=a if keep_records else None,
                              shift=float(shift), private_edges=private_edges)


def superstore_sales(bins=2304, method: str = "equal_width", range=SUPERSTORE_SALES_RANGE) -> NumericalAttribute:
    """Sales (USD) of the 9994 Tableau Sample Superstore orders (bokeh-sampledata).

    Default: 2304 buckets of 10 USD over the fixed, public domain [0, 23040]
    (every sale lies in it; the largest is 22638.48).  Values are
    non-negative.

    Raises
    ------
    ImportError
        If ``bokeh-sampledata`` is not installed.
    ValueError
        As :func:`numerical_attribute`.
    """
    return _superstore_attribute("Sales", bins, method, range)


def superstore_profit(bins=1500, method: str = "equal_width", range=SUPERSTORE_PROFIT_RANGE,
                      shift: float = 0.0) -> NumericalAttribute:
    """Profit (USD) of the 9994 Superstore orders; 1871 orders have a *negative* profit.

    Sum mechanisms assume non-negative values (truncation from above; the
    sensitivity of a sum is its largest value), so :mod:`dpexplorer.sums`
    refuses this attribute as is.  Pass ``shift=6600`` (the public lower
    bound of the domain) to sum ``profit + 6600`` instead; ``range`` is then
    shifted too.  Default: 1500 buckets of 10 USD over [-6600, 8400].

    Raises
    ------
    ImportError
        If ``bokeh-sampledata`` is not installed.
    ValueError
        As :func:`numerical_attribute`.
    """
    return _superstore_attribute("Profit", bins, method, range, shift)


def _superstore_attribute(column: str, bins, method: str, range, shift: float = 0.0):
    """A Superstore column as a :class:`NumericalAttribute` (``range`` shifted with the values)."""
    rng = (None if range is None or method == "quantile" or not _counted(bins)
           else (range[0] + shift, range[1] + shift))
    return numerical_attribute(_superstore_frame()[column].to_numpy(dtype=np.float64), bins,
                               method, rng, name=f"Superstore {column}", unit="USD", shift=shift,
                               description="9994 Tableau Sample Superstore orders "
                               f"(bokeh-sampledata sample_superstore), {column} per order")


def _counted(bins) -> bool:
    """Whether ``bins`` is a number of buckets (the range applies) rather than edges."""
    return isinstance(bins, (int, np.integer)) and not isinstance(bins, (bool, np.bool_))


def _superstore_frame() -> pd.DataFrame:
    try:
        from bokeh.sampledata.sample_superstore import data
    except ModuleNotFoundError as exc:
        raise ImportError("the Superstore attributes need bokeh-sampledata "
                          "(pip install bokeh-sampledata)") from exc
    return data


def dpbench_income(directory=None, bin_width: float = 1.0, lower: float = 0.0) -> NumericalAttribute:
    """The DPBench INCOME histogram (IPUMS ACS 2001-2011 personal income, 4096 buckets).

    The files hold counts only; the income range of a DPBench bucket is not
    recorded, so by default bucket ``j`` is ``[j, j + 1)`` in *bucket units*
    (``unit = "bin"``) and its upper-edge value is ``j + 1``.  Give
    ``bin_width`` (and ``lower``) if the bucket width in currency is known.

    Raises
    ------
    FileNotFoundError
        If the DPBench folder does not exist.
    ValueError
        For a non-positive or non-finite ``bin_width`` or ``lower``.
    """
    for value, what in ((bin_width, "bin_width"), (lower, "lower")):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise ValueError(f"{what} must be a finite number, got {value!r}")
    if not bin_width > 0:
        raise ValueError(f"bin_width must be a positive finite number, got {bin_width!r}")
    x = load_dpbench("INCOME", directory)
    edges = float(lower) + float(bin_width) * np.arange(x.size + 1, dtype=np.float64)
    unit = "bin" if bin_width == 1.0 and lower == 0.0 else "currency"
    return NumericalAttribute(
        name="DPBench INCOME", x=x, edges=edges, unit=unit, n_records=int(x.sum()),
        description=(f"DPBench INCOME (IPUMS ACS 2001-2011 personal income, Hay et al. SIGMOD 2016): "
                     f"{int(x.sum()):,} people in {x.size} buckets of width {bin_width:g} from {lower:g}"))


def numerical_from_csv(path_or_buffer, column: str, bins, method: str = "equal_width", range=None,
                       shift: float = 0.0, name: str | None = None) -> NumericalAttribute:
    """One numeric column of a CSV file (one record per row) as a :class:`NumericalAttribute`.

    Raises
    ------
    ValueError
        Missing or non-numeric column, missing values (with how many), or as
        :func:`numerical_attribute`.
    """
    df = read_csv(path_or_buffer)
    values = numeric_column(df, column)
    return numerical_attribute(values, bins, method, range, name=name or str(column), shift=shift,
                               description=f"column {column!r} ({values.size:,} rows)")


#: Numerical attributes offered for sum queries: ``name -> loader(**options)``.
NUMERICAL: dict[str, Callable[..., NumericalAttribute]] = {
    "superstore_sales": superstore_sales,
    "superstore_profit": superstore_profit,
    "dpbench_income": dpbench_income,
}


def load_numerical(name: str, **options) -> NumericalAttribute:
    """Load a numerical attribute by name (see :data:`NUMERICAL`).

    Raises
    ------
    UnknownDatasetError
        For an unknown name, listing the available ones.
    """
    if name not in NUMERICAL:
        raise UnknownDatasetError(f"unknown numerical attribute {name!r}; available: {sorted(NUMERICAL)}")
    return NUMERICAL[name](**options)


# ================================================================ record tables
#: Public domain of the bundled Superstore orders table: six categorical attributes (their
#: categories are the published schema of Tableau's "Sample - Superstore" data) and Sales and
#: Profit in fixed, data-independent log-spaced bins (USD).  120,000 × 32 × 24 ≈ 9.2·10⁷ cells.
SUPERSTORE_TABLE_ATTRIBUTES = {
    "Ship Mode": ("First Class", "Same Day", "Second Class", "Standard Class"),
    "Segment": ("Consumer", "Corporate", "Home Office"),
    "Region": ("Central", "East", "South", "West"),
    "Category": ("Furniture", "Office Supplies", "Technology"),
    "Sub-Category": ("Accessories", "Appliances", "Art", "Binders", "Bookcases", "Chairs", "Copiers",
                     "Envelopes", "Fasteners", "Furnishings", "Labels", "Machines", "Paper", "Phones",
                     "Storage", "Supplies", "Tables"),
    "State": ("Alabama", "Arizona", "Arkansas", "California", "Colorado", "Connecticut", "Delaware",
              "District of Columbia", "Florida", "Georgia", "Idaho", "Illinois", "Indiana", "Iowa",
              "Kansas", "Kentucky", "Louisiana", "Maine", "Maryland", "Massachusetts", "Michigan",
              "Minnesota", "Mississippi", "Missouri", "Montana", "Nebraska", "Nevada", "New Hampshire",
              "New Jersey", "New Mexico", "New York", "North Carolina", "North Dakota", "Ohio",
              "Oklahoma", "Oregon", "Pennsylvania", "Rhode Island", "South Carolina", "South Dakota",
              "Tennessee", "Texas", "Utah", "Vermont", "Virginia", "Washington", "West Virginia",
              "Wisconsin", "Wyoming"),
}
#: Sales bins: 0, then 31 log-spaced edges from 0.25 to 23040 USD (the Sales range above).
SUPERSTORE_TABLE_SALES_EDGES = (0.0, *np.geomspace(0.25, SUPERSTORE_SALES_RANGE[1], 32).tolist())
#: Profit bins: 0 and 12 log-spaced edges on each side, from 1 USD to the ends of the Profit range (24 bins).
SUPERSTORE_TABLE_PROFIT_EDGES = (*(-np.geomspace(1.0, -SUPERSTORE_PROFIT_RANGE[0], 12))[::-1].tolist(), 0.0,
                                 *np.geomspace(1.0, SUPERSTORE_PROFIT_RANGE[1], 12).tolist())


def superstore_domain():
    """The public :class:`~dpexplorer.queries.domain.Domain` of :func:`superstore_table`."""
    from .queries.domain import Attribute, Domain

    attrs = [Attribute(name, categories=cats) for name, cats in SUPERSTORE_TABLE_ATTRIBUTES.items()]
    attrs.append(Attribute("Sales", edges=SUPERSTORE_TABLE_SALES_EDGES))
    attrs.append(Attribute("Profit", edges=SUPERSTORE_TABLE_PROFIT_EDGES))
    # declared: the categories are the dataset's published schema, the bins fixed edges
    return Domain(tuple(attrs), source="declared")


def superstore_table(dask_partitions: int | None = None):
    """The Superstore orders (bokeh-sampledata) as a record :class:`Table` over 8 attributes.

    9,994 orders; domain :func:`superstore_domain` (Ship Mode, Segment,
    Region, Category, Sub-Category, State, Sales and Profit binned), about
    9.2·10⁷ cells -- releases count its marginals by group-by, never the full
    vector.

    Parameters
    ----------
    dask_partitions : int, optional
        Return the records as a ``dask.dataframe`` with this many partitions.

    Raises
    ------
    ImportError
        If ``dask_partitions`` is given and dask is not installed.
    """
    from .queries.domain import Table

    dom = superstore_domain()
    frame = _superstore_frame()[list(dom.names)].copy()
    if dask_partitions is not None:
        import dask.dataframe as dd

        frame = dd.from_pandas(frame, npartitions=int(dask_partitions))
    return Table(frame, dom, "superstore_orders",
                 "9,994 Tableau Sample Superstore orders (bokeh-sampledata sample_superstore): "
                 "Ship Mode, Segment, Region, Category, Sub-Category, State, Sales (32 log bins, USD), "
                 "Profit (24 symmetric log bins, USD)", source="bokeh-sampledata")


#: Record tables bundled with the package: name -> loader.
TABLES: dict[str, Callable] = {"superstore_orders": superstore_table}
#: Where every bundled record table comes from (shown next to the app's table list).
TABLE_SOURCES = {"superstore_orders": BUNDLED_SOURCES["superstore"]}


def table_from_csv(path_or_buffer, attributes=None, bins: dict | None = None, ranges: dict | None = None,
                   name: str = "uploaded table", domain=None):
    """A record :class:`Table` from a CSV file: chosen columns, numeric ones binned.

    With ``domain`` (a :class:`~dpexplorer.queries.domain.Domain`, or the path
    of a schema file for :meth:`Domain.from_file`) the table is over that
    declared public domain and can be released.  Without it the domain is
    read from the records (:meth:`dpexplorer.queries.domain.Table.from_dataframe`,
    marked ``source="data"``): fine for simulations and teaching, refused by
    :func:`dpexplorer.release` -- declare it, or discover it privately with
    :func:`dpexplorer.discover_domain`.  The description names the file's
    origin only (never the number of records).

    Parameters
    ----------
    path_or_buffer : str, path or file-like
    attributes : list of str, optional
        Columns the table is over (default: the domain's attributes; required without ``domain``).
    bins, ranges : dict, optional
        As :meth:`Table.from_dataframe` (only without ``domain``).
    name : str
    domain : Domain or str or path, optional

    Raises
    ------
    ValueError
        If the file is empty or not CSV, a column is missing or unusable, or
        the schema file is invalid.
    TypeError
        If ``bins``/``ranges`` are given with ``domain``, or ``attributes``
        is missing without one.
    LimitExceededError
        If the file is above the ``upload_bytes`` limit (checked before
        reading), or bins or attributes above their limits.
    """
    from .queries.domain import Domain, Table

    if domain is not None and not isinstance(domain, Domain):
        domain = Domain.from_file(domain)
    if domain is not None and (bins or ranges):
        raise TypeError("bins and ranges are read from the declared domain: give either domain or bins/ranges")
    if domain is None and attributes is None:
        raise TypeError("give the attributes (columns) of the table, or its declared domain")
    df = read_csv(path_or_buffer)
    if df.empty:
        raise ValueError("the CSV file has no rows")
    if domain is not None:
        if attributes is not None:
            domain = domain.select(list(attributes))
        return Table(df[[c for c in domain.names if c in df.columns]], domain, name,
                     "uploaded CSV over a declared domain")
    table = Table.from_dataframe(df, list(attributes), bins=bins, ranges=ranges, name=name)
    table.description = ("uploaded CSV (domain read from the records: simulations only)"
                         if table.domain.inferred else "uploaded CSV over declared ranges")
    return table
