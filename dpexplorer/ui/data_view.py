"""DataView: the "Data & DAWA" page.

Shows the selected dataset (1D histogram or 2D grid), simulates DAWA on it (Li, Hay, Miklau,
Wang, PVLDB 2014; :func:`dpexplorer.dawa_study.study`, a task of the page) and draws its private
partition, the estimate ``x̂`` against ``x`` and each stage's budget, beside the exact least-cost
partition (not private, for comparison only).  Datasets are uploaded as a CSV column
(:func:`dpexplorer.datasets.from_csv`) or a ``.npy`` array of counts.  A run uses a throwaway
ledger and a Generator seeded by the sidebar's simulation seed: nothing is spent (releases: the
Release page).
"""

from __future__ import annotations

import io
from pathlib import PurePath

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.palettes import Category20

import dpexplorer as dpx
from dpexplorer.adaptive.dawa import DEFAULT_SCALING, DEFAULTS, noise_scales
from dpexplorer.adaptive.partition import Partition
from dpexplorer.datasets import Dataset
from dpexplorer.dawa_study import (  # noqa: F401  (ALL_CANDIDATES_MAX_N, RANDOM_WORKLOAD: the page's too)
    ALL_CANDIDATES_MAX_N,
    RANDOM_WORKLOAD,
    DAWARun,
    study,
)

from .exports import FigureExport
from .serving import COLOR as _BUTTON
from .serving import LABEL as _LABEL
from .serving import LazyCard, on_session_loop
from .session import Page, Session, side_by_side
from .session import exception_message as _message
from .table_release import OUT, start_run
from .uploads import Upload

__all__ = ["DataView", "DAWARun", "ALL_CANDIDATES_MAX_N", "RANDOM_WORKLOAD", "histogram_element",
           "partition_explanation", "partition_rectangles", "bucket_image", "bucket_boundaries",
           "steps_curve"]

#: Alternating bucket shading (1D) and the categorical palette of bucket ids (2D: Category10,
#: then its light shades).
_SHADES = ("#4c72b0", "#dd8452")
_PALETTE = list(Category20[20][0::2] + Category20[20][1::2])

PENALTY_HELP = (
    "Extra cost per bucket, in units of that bucket's noise scale (default 0 = DAWA's "
    "Algorithm 1 as printed in the paper). With the paper's costs the least noisy-cost partition "
    "tends to collect buckets whose noise happens to be very negative, giving many small "
    "buckets whatever the data. A data-independent offset does not change the costs' "
    "sensitivity, so stage 1 stays ε₁-DP; a penalty around 3 brings the private partition "
    "closer to the exact least-cost one.")
RATIO_HELP = ("Share of ε spent on stage 1, the private partition: ε₁ = ratio·ε, and the "
              "bucket counts get ε₂ = (1 − ratio)·ε. The paper uses 0.25.")
CANDIDATES_HELP = ("Candidate buckets of stage 1: intervals whose length is a power of two "
                   "(pow2, fast) or all intervals (all, O(n²), only for n ≤ 4096).")

HEADER = """\
## Data & DAWA

**DAWA** (Li, Hay, Miklau, Wang, PVLDB 2014) is *data-aware*: with a share ε₁ of the
budget it privately groups neighbouring cells with similar counts into **buckets**
(stage 1, a noisy least-cost partition), then with the rest ε₂ it measures the bucket
totals with a strategy fitted to the workload (stage 2, GreedyH) and spreads each total
uniformly over its bucket to give the estimate **x̂**.  Smooth data *needs* few buckets
(the exact partition drawn beside DAWA's shows how few), but the private partition is
chosen from noisy costs and, at the paper's settings, has many more: **What you see**
below explains why, on your run.  2D grids are laid
out along a Hilbert curve so buckets are contiguous pieces of that curve.  DAWA is
ε-DP (Laplace noise).  This page is a **simulation** on your data (seeded by the sidebar's
simulation seed, nothing spent): it shows the data and the exact partition beside DAWA's,
which a release never would.  To publish DAWA's answers, use the **Release** page.
This page runs the paper's settings (adjustable below); the registered `dawa` of the
Compare and Release pages uses defaults tuned on other DPBench data.  DAWA's *published*
accuracy came from the authors' code, which was not private (see the **Audit** page).
"""


def _cell_edges(ds: Dataset, axis: int) -> np.ndarray:
    size = ds.x.shape[axis]
    edges = np.asarray(ds.edges[axis], dtype=float) if len(ds.edges) > axis else None
    return edges if edges is not None and edges.shape == (size + 1,) else np.arange(size + 1.0)


def _centers(edges: np.ndarray) -> np.ndarray:
    return 0.5 * (edges[:-1] + edges[1:])


def _attr(ds: Dataset, axis: int) -> str:
    names = tuple(ds.attributes) if ds.attributes else ()
    default = ("bin",) if ds.x.ndim == 1 else ("row", "col")
    return str(names[axis]) if len(names) > axis else default[axis]


def _top(*arrays) -> float:
    top = max(float(np.max(a)) for a in arrays)
    return top * 1.05 if top > 0 else 1.0


def histogram_element(ds: Dataset, title: str | None = None):
    """The dataset as an ``hv.Histogram`` (1D) or ``hv.Image`` (2D, eq-hist colours)."""
    title = title or f"{ds.name}: {ds.n_records:,} records, shape {ds.x.shape}"
    if ds.x.ndim == 1:
        return hv.Histogram((_cell_edges(ds, 0), ds.x), kdims=[_attr(ds, 0)], vdims=["count"]).opts(
            color="#6d904f", line_color=None, alpha=0.8, tools=["hover"], title=title,
            responsive=True, height=300)
    return _grid_image(ds, ds.x, "count", title)


def _grid_image(ds: Dataset, values: np.ndarray, vdim: str, title: str, cmap: str = "viridis"):
    xe, ye = _cell_edges(ds, 0), _cell_edges(ds, 1)
    grid = np.asarray(values, dtype=float).reshape(ds.x.shape)
    return hv.Image((_centers(xe), _centers(ye), grid.T), kdims=[_attr(ds, 0), _attr(ds, 1)],
                    vdims=[vdim]).opts(cmap=cmap, cnorm="eq_hist", colorbar=True, tools=["hover"],
                                       title=title, responsive=True, height=340)


def partition_rectangles(partition: Partition, edges: np.ndarray, top: float,
                         label: str = "buckets") -> hv.Rectangles:
    """Alternating-colour rectangles over ``[0, top]``, bucket ``j`` over ``edges[lo_j] ..
    edges[hi_j + 1]`` (columns ``x0, y0, x1, y1, parity, bucket, cells``)."""
    edges = np.asarray(edges, dtype=float)
    k = partition.k
    data = pd.DataFrame({
        "x0": edges[partition.lo], "y0": np.zeros(k), "x1": edges[partition.hi + 1],
        "y1": np.full(k, float(top)), "parity": np.arange(k) % 2, "bucket": np.arange(k),
        "cells": partition.sizes})
    return hv.Rectangles(data, vdims=["parity", "bucket", "cells"], label=label).opts(
        color=hv.dim("parity").categorize({0: _SHADES[0], 1: _SHADES[1]}), alpha=0.3,
        line_alpha=0.0, tools=["hover"])


def steps_curve(edges: np.ndarray, values: np.ndarray, label: str, kdim: str = "bin",
                vdim: str = "count") -> hv.Curve:
    """A per-cell value as a step line over the cells' edges."""
    values = np.asarray(values, dtype=float)
    return hv.Curve((np.asarray(edges, dtype=float), np.append(values, values[-1])),
                    kdims=[kdim], vdims=[vdim], label=label).opts(interpolation="steps-post")


def bucket_boundaries(ds: Dataset, ids: np.ndarray) -> hv.Segments:
    """Segments along every cell side shared by two cells of different buckets (2D)."""
    xe, ye = _cell_edges(ds, 0), _cell_edges(ds, 1)
    i, j = np.nonzero(ids[1:, :] != ids[:-1, :])  # between rows i and i+1: constant x = xe[i+1]
    seg_a = np.column_stack([xe[i + 1], ye[j], xe[i + 1], ye[j + 1]])
    i, j = np.nonzero(ids[:, 1:] != ids[:, :-1])  # between columns j and j+1: y = ye[j+1]
    seg_b = np.column_stack([xe[i], ye[j + 1], xe[i + 1], ye[j + 1]])
    segs = np.vstack([seg_a, seg_b]) if len(seg_a) + len(seg_b) else np.empty((0, 4))
    return hv.Segments(segs, kdims=[_attr(ds, 0), _attr(ds, 1), "x1", "y1"]).opts(
        color="white", line_width=0.8, alpha=0.9)


def bucket_image(ds: Dataset, partition: Partition, order, title: str):
    """2D: every cell coloured by its bucket (categorical, cyclic palette) with boundaries."""
    ids = partition.bucket_grid(order, ds.x.shape)
    xe, ye = _cell_edges(ds, 0), _cell_edges(ds, 1)
    img = hv.Image((_centers(xe), _centers(ye), (ids % len(_PALETTE)).T, ids.T),
                   kdims=[_attr(ds, 0), _attr(ds, 1)], vdims=["colour", "bucket"]).opts(
        cmap=_PALETTE, clim=(-0.5, len(_PALETTE) - 0.5), colorbar=False, tools=["hover"],
        title=title, responsive=True, height=340)
    return img * bucket_boundaries(ds, ids)


def _show_plot(pane: pn.pane.HoloViews, obj) -> None:
    """Draw ``obj`` in ``pane``, or hide it for None; ``visible`` never changes while it holds a
    figure (Panel 1.9 would copy the template's design onto it: an AttributeError)."""
    if obj is not None:
        pane.visible = True
    pane.object = obj
    pane.visible = obj is not None


class DataView(Page, param.Parameterized):
    """The "Data & DAWA" page around one :class:`~dpexplorer.ui.session.Session` (``session``, a
    new one if omitted); ``background``: DAWA in worker threads (True), in the caller's thread
    (False), or the first only in a served page (None, the default)."""

    # DAWA options
    ratio = param.Number(default=0.25, bounds=(0, 1), inclusive_bounds=(False, False),
                         softbounds=(0.05, 0.95), step=0.05, doc=RATIO_HELP)
    candidates = param.Selector(default="pow2", objects=["pow2", "all"], doc=CANDIDATES_HELP)
    penalty = param.Number(default=0.0, bounds=(0, None), softbounds=(0, 10), doc=PENALTY_HELP)
    # upload
    csv_column = param.Selector(default=None, objects=[], allow_None=True, check_on_set=False,
                                doc="Column of the uploaded CSV to bin (one record per row).")
    bins = param.Integer(default=64, bounds=(1, 65536), doc="Number of equal-width bins.")
    range_lo = param.Number(default=None, allow_None=True, doc="""
        Lower edge of the bins (optional; default the column's minimum, which is not private).""")
    range_hi = param.Number(default=None, allow_None=True, doc="""
        Upper edge of the bins (optional; default the column's maximum, which is not private).""")
    # outputs
    last = param.ClassSelector(class_=DAWARun, default=None, allow_None=True, **OUT,
                               doc="The last successful run (kept on errors).")
    busy = param.Boolean(default=False, **OUT, doc="True while DAWA runs.")
    error = param.String(default="", **OUT, doc="Message of the last failed action ('' after a success).")

    def __init__(self, session: Session | None = None, background: bool | None = None,
                 **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        self._csv: tuple[bytes, str, pd.DataFrame] | None = None
        self._layout = None
        super().__init__(**params)

    def run(self) -> bool:
        """Simulate DAWA on the selected dataset with the session's ε and simulation seed.

        A task of the page; nothing is spent.  Returns as
        :func:`~dpexplorer.ui.table_release.start_run`; a failure keeps :attr:`last`.
        """
        return start_run(self, lambda _task, kw: study(**kw), "DAWA is already running; wait for it "
                         "to finish", name="dawa", done=lambda run: self._set(last=run, error=""))

    def rerun_with_new_seed(self) -> bool:
        """Advance the session seed by one and run again (fresh noise)."""
        self.session.seed = int(self.session.seed) + 1
        return self.run()

    def _inputs(self) -> dict:
        """The arguments of :func:`dpexplorer.dawa_study.study`, from the page and the session."""
        eps = float(self.session.epsilon)
        note = ""
        if self.session.noise != "Laplace":
            note = (f"DAWA is ε-DP (Laplace noise only): it ran with Laplace(ε = {eps:g}); "
                    "δ is not used.")
        return dict(ds=self.session.data(), W=self.session.workload, epsilon=eps,
                    seed=int(self.session.seed), ratio=float(self.ratio),
                    candidates=self.candidates, penalty=float(self.penalty), noise_note=note)

    def load_csv(self, data: bytes, filename: str = "upload.csv") -> bool:
        """Parse an uploaded CSV (bytes) and offer its columns; ``True`` on success."""
        try:
            if not data:
                raise ValueError("the file is empty: a CSV needs a header row and data rows")
            buffer = io.BytesIO(data)
            buffer.name = filename
            df = dpx.datasets.read_csv(buffer)  # the upload_bytes limit, pandas' errors in words
            if df.shape[1] == 0 or len(df) == 0:
                raise ValueError("no columns or no rows found")
        except Exception as exc:  # noqa: BLE001 - any parser error
            self._fail(ValueError(f"could not read {filename!r} as CSV: {_message(exc)}"))
            return False
        self._csv = (bytes(data), filename, df)
        columns = list(df.columns)
        numeric = [c for c in columns if pd.api.types.is_numeric_dtype(df[c])
                   and not pd.api.types.is_bool_dtype(df[c])]
        self.param.csv_column.objects = columns
        self.csv_column = numeric[0] if numeric else columns[0]
        self._set(error="")
        return True

    @property
    def csv_columns(self) -> list:
        """Columns of the uploaded CSV (empty before an upload)."""
        return list(self.param.csv_column.objects)

    def add_csv_dataset(self, column=None, bins: int | None = None) -> Dataset | None:
        """Bin a column of the uploaded CSV and add it to the session (selected); the new
        :class:`Dataset`, or ``None`` after reporting why (no CSV, bad column, bins or range)."""
        try:
            if self._csv is None:
                raise ValueError("upload a CSV file first")
            data, filename, df = self._csv
            column = self.csv_column if column is None else column
            bins = self.bins if bins is None else bins
            if column is None:
                raise ValueError("pick a column of the CSV")
            if not isinstance(bins, (int, np.integer)) or isinstance(bins, bool) or bins < 1:
                raise ValueError(f"the number of bins must be a positive integer, got {bins!r}")
            rng = None
            if self.range_lo is not None or self.range_hi is not None:
                if self.range_lo is None or self.range_hi is None:
                    raise ValueError("give both ends of the bin range, or neither")
                rng = (self.range_lo, self.range_hi)
            counts, edges = dpx.datasets.from_csv(io.BytesIO(data), column, int(bins), range=rng)
            where = "the column's min..max" if rng is None else "the given range"
            ds = Dataset(name=self._unique_name(f"{PurePath(filename).stem}: {column}"), x=counts,
                         edges=(edges,), attributes=(str(column),),
                         description=(f"Column {column!r} of the uploaded {filename} ({len(df):,} "
                                      f"rows) in {int(bins)} equal-width bins over [{edges[0]:g}, "
                                      f"{edges[-1]:g}] ({where})"),
                         n_records=int(counts.sum()), frame=df,
                         source=dpx.datasets.upload_source(filename))
            self.session.add_dataset(ds)
        except Exception as exc:  # noqa: BLE001 - reported, state kept
            self._fail(exc)
            return None
        self._set(error="")
        return ds

    def load_npy(self, data: bytes, filename: str = "upload.npy") -> Dataset | None:
        """Add an uploaded ``.npy`` array of counts (1D or 2D) to the session (selected); the new
        :class:`Dataset`, or ``None`` after reporting why (not .npy, bad counts or shape)."""
        try:
            if not data:
                raise ValueError("the file is empty")
            try:
                x = dpx.datasets.from_npy(io.BytesIO(data))
            except ValueError:
                raise
            except Exception as exc:  # noqa: BLE001 - np.load's many failure types
                raise ValueError(f"not a readable .npy array ({_message(exc)})") from exc
            ds = Dataset(name=self._unique_name(PurePath(filename).stem or "upload"), x=x,
                         edges=tuple(np.arange(s + 1, dtype=float) for s in x.shape),
                         attributes=("bin",) if x.ndim == 1 else ("row", "col"),
                         description=f"Uploaded {filename}: counts of shape {x.shape}",
                         n_records=int(x.sum()), source=dpx.datasets.upload_source(filename))
            self.session.add_dataset(ds)
        except Exception as exc:  # noqa: BLE001 - reported, state kept
            self._fail(ValueError(f"{filename}: {_message(exc)}"))
            return None
        self._set(error="")
        return ds

    def _unique_name(self, base: str) -> str:
        taken = set(self.session.param.dataset.objects)
        name, i = base, 2
        while name in taken:
            name, i = f"{base} ({i})", i + 1
        return name

    def current_dataset(self) -> Dataset | None:
        """The session's selected dataset, or ``None`` (reported) if it cannot be loaded."""
        try:
            return self.session.data()
        except Exception as exc:  # noqa: BLE001
            self._fail(exc)
            return None

    def data_plot(self):
        """Histogram (1D) or image (2D) of the selected dataset."""
        ds = self.current_dataset()
        if ds is None:
            return hv.Curve([]).opts(title="No data", responsive=True, height=300)
        return histogram_element(ds)

    def _partition_plot(self, run: DAWARun | None, private: bool):
        run = run or self.last
        if run is None:
            return None
        ds, res = run.dataset, run.result
        p = res.partition if private else run.exact
        title = (f"DAWA, private: {p.k} buckets (ε₁ = {res.epsilon1:.3g})" if private
                 else f"Exact, NOT PRIVATE: {p.k} buckets")
        if ds.x.ndim != 1:
            return bucket_image(ds, p, res.order, title)
        edges, kd = _cell_edges(ds, 0), _attr(ds, 0)
        means, label, colour = ((res.x_hat, "x̂: noisy bucket means", "#c44e52") if private
                                else (p.expand(p.counts(ds.x)), "true bucket means", "#55a868"))
        return (partition_rectangles(p, edges, _top(ds.x, res.x_hat),
                                     "private buckets" if private else "exact buckets")
                * histogram_element(ds).relabel("x (data)")
                * steps_curve(edges, means, label, kd).opts(color=colour, line_width=2)).opts(
            title=title, legend_position="bottom", xlabel=kd, ylabel="count")

    def private_partition_plot(self, run: DAWARun | None = None):
        """DAWA's private partition over the data (1D: shaded buckets + bucket means of x̂)."""
        return self._partition_plot(run, private=True)

    def exact_partition_plot(self, run: DAWARun | None = None):
        """The exact least-cost partition of x (NOT private), drawn like the private one."""
        return self._partition_plot(run, private=False)

    def estimate_plot(self, run: DAWARun | None = None):
        """x̂ against x: 1D overlay; 2D both grids and their overlay along the Hilbert curve."""
        run = run or self.last
        if run is None:
            return None
        ds, res = run.dataset, run.result
        if ds.x.ndim == 1:
            return (histogram_element(ds).relabel("x (data)")
                    * steps_curve(_cell_edges(ds, 0), res.x_hat, "x̂ (DAWA)", _attr(ds, 0)).opts(
                        color="#c44e52", line_width=2)).opts(
                title=f"x̂ against x (workload RMSE {run.workload_rmse:.4g})",
                legend_position="top_right")
        lines = bucket_boundaries(ds, res.partition.bucket_grid(res.order, ds.x.shape))
        return hv.Layout([
            _grid_image(ds, ds.x, "count", "x (data)") * lines,
            _grid_image(ds, res.x_hat, "estimate", "x̂ (DAWA) with the private buckets") * lines,
        ]).cols(2)

    def hilbert_plot(self, run: DAWARun | None = None):
        """2D only: x and x̂ along DAWA's Hilbert order, with the private buckets shaded."""
        run = run or self.last
        if run is None or run.result.order is None:
            return None
        edges = np.arange(run.result.partition.n + 1, dtype=float)
        xs, xh = run.ordered_x, run.ordered_x_hat
        return (partition_rectangles(run.result.partition, edges, _top(xs, xh), "private buckets")
                * steps_curve(edges, xs, "x (data)", "Hilbert position").opts(color="#6d904f")
                * steps_curve(edges, xh, "x̂ (DAWA)", "Hilbert position").opts(
                    color="#c44e52", line_width=1.5)).opts(
            title="Along the Hilbert curve (DAWA's cell order): buckets are contiguous here",
            responsive=True, height=300, legend_position="top_right", xlabel="Hilbert position",
            ylabel="count")

    def summary(self, run: DAWARun | None = None) -> str:
        """Markdown: budget of each stage, bucket counts, workload, seed, ledger entries."""
        run = run or self.last
        if run is None:
            return ("No DAWA run yet. Pick the options and click **Run DAWA**: a *simulation* "
                    f"with ε = {self.session.epsilon:g} and the simulation seed "
                    f"{self.session.seed}; nothing is spent (release with DAWA on the Release page).")
        res = run.result
        text = [
            f"**Dataset** `{run.dataset.name}` (n = {run.dataset.x.size:,} cells), "
            f"**workload** {run.workload_note}, **simulation seed** {run.seed}, ratio {run.ratio:g}, "
            f"penalty {run.penalty:g}.", "",
            "| stage | budget | output |", "|---|---|---|",
            f"| 1. private partition (noisy least-cost, {run.candidates}) | ε₁ = {res.epsilon1:.4g} "
            f"| {res.partition.k} buckets |",
            f"| 2. bucket counts ({res.scaling}: {res.strategy.m} weighted queries) "
            f"| ε₂ = {res.epsilon2:.4g} | {res.partition.k} noisy bucket totals → x̂ |",
            f"| **total** | **ε = {res.epsilon1 + res.epsilon2:.4g}** | |", "",
            f"**Exact optimal partition** (not private, for comparison): {run.exact.k} buckets, "
            f"cost {run.exact_cost:.4g}.  **Workload RMSE of x̂** (vs. the true answers): "
            f"{run.workload_rmse:.4g}.",
            f"*Simulation:* nothing was spent from the dataset's budget; a release would record "
            f"{len(run.spends)} measurements, ε = {sum(s.epsilon for s in run.spends):.4g}.",
        ]
        if run.noise_note:
            text += ["", f"*{run.noise_note}*"]
        if run.dataset.name != self.session.dataset:
            text += ["", f"*This result is for `{run.dataset.name}`; the selected dataset is now "
                         f"`{self.session.dataset}` (click Run DAWA to update).*"]
        return "\n".join(text)

    def explanation(self, run: DAWARun | None = None) -> str:
        """Markdown "What you see": the private partition's size against the exact one, and why."""
        run = run or self.last
        return "" if run is None else partition_explanation(run)

    def controls(self) -> pn.Column:
        """Options, run buttons and the upload card."""
        ratio = pn.widgets.FloatSlider.from_param(
            self.param.ratio, start=0.05, end=0.95, step=0.05, **{_LABEL: "ratio (ε₁ share)"})
        cands = pn.widgets.RadioButtonGroup.from_param(
            self.param.candidates, **{_LABEL: "candidates"}, description=CANDIDATES_HELP)
        penalty = pn.widgets.FloatInput.from_param(
            self.param.penalty, start=0.0, step=0.5, **{_LABEL: "penalty"},
            description=PENALTY_HELP)
        run = pn.widgets.Button(**{_LABEL: "Run DAWA", _BUTTON: "primary"}, disabled=self.param.busy)
        rerun = pn.widgets.Button(**{_LABEL: "Re-run with the next simulation seed", _BUTTON: "default"},
                                  disabled=self.param.busy)
        run.on_click(lambda _: self.run())
        rerun.on_click(lambda _: self.rerun_with_new_seed())
        seed_note = pn.pane.Markdown(self._seed_text(), sizing_mode="stretch_width")
        self.session.param.watch(
            lambda e: self.gate.run("seed", lambda: setattr(seed_note, "object", self._seed_text())),
            ["seed", "epsilon", "noise"])
        return pn.Column(pn.pane.Markdown("### DAWA options"),
                         pn.Row(ratio, pn.widgets.TooltipIcon(value=RATIO_HELP)), cands, penalty,
                         run, rerun, seed_note, self.upload_card(), width=300)

    def _seed_text(self) -> str:
        s = self.session
        text = (f"A simulation with ε = {s.epsilon:g} and simulation seed {s.seed} (sidebar); "
                "nothing is spent.")
        if s.noise != "Laplace":
            text += " DAWA is ε-DP: Laplace(ε) is used, δ is ignored."
        return text

    def upload_card(self) -> pn.Card:
        """CSV (column + bins) and .npy uploads."""
        report, no_csv = self.session.report, pn.bind(lambda c: c is None, self.param.csv_column)
        csv_in = Upload(accepted_filetypes=[".csv", "text/csv"], on_error=report, on_file=self.load_csv)
        npy_in = Upload(accepted_filetypes=[".npy"], on_error=report, on_file=self.load_npy)
        column = pn.widgets.Select.from_param(self.param.csv_column, **{_LABEL: "Column"},
                                              disabled=no_csv)
        bins = pn.widgets.IntInput.from_param(self.param.bins, start=1, end=65536, **{_LABEL: "Bins"})
        lo = pn.widgets.FloatInput.from_param(self.param.range_lo, **{_LABEL: "Range from (optional)"})
        hi = pn.widgets.FloatInput.from_param(self.param.range_hi, **{_LABEL: "Range to (optional)"})
        add = pn.widgets.Button(**{_LABEL: "Add column as dataset", _BUTTON: "success"}, disabled=no_csv)
        add.on_click(lambda _: self.add_csv_dataset())
        return LazyCard(
            pn.pane.Markdown("**CSV**: one record per row; pick a numeric column and a number "
                             "of bins (fix the range for a truly private pipeline: the default "
                             "min..max comes from the data)."),
            csv_in, csv_in.note(), column, bins, lo, hi, add,
            pn.pane.Markdown("**.npy**: a 1D or 2D array of non-negative whole counts."), npy_in,
            npy_in.note(),
            title="Upload data", collapsed=True, sizing_mode="stretch_width")

    def results(self) -> pn.Column:
        """Data histogram, partitions, estimate and budget summary (redrawn after each run)."""
        ran = self.last is not None

        def pane(obj, height, visible=ran):
            return pn.pane.HoloViews(obj, sizing_mode="stretch_width", height=height,
                                     visible=visible)

        def text(obj, **options):
            return pn.pane.Markdown(obj, sizing_mode="stretch_width", **options)
        data_pane, data_info = pane(self.data_plot(), 320, True), text(self._data_text())
        summary, explain = text(self.summary()), text(self.explanation(), visible=ran)
        private = pane(self.private_partition_plot(), 360)
        exact = pane(self.exact_partition_plot(), 360)
        estimate = pn.Row(*self._estimate_panes(self.last), sizing_mode="stretch_width",
                          visible=ran)
        hilbert = pane(self.hilbert_plot(), 320, self.hilbert_plot() is not None)
        self.exports: dict = {}
        for name, make in (("data", self.data_plot), ("private-partition", self.private_partition_plot),
                           ("exact-partition", self.exact_partition_plot),
                           ("estimate", self.estimate_plot), ("hilbert", self.hilbert_plot)):
            FigureExport("data", name, make, report=self.session.report, into=self.exports)
        run_exports = [e for name, e in self.exports.items() if name != "data"]

        def show_exports():
            for exp in run_exports:
                exp.show(exp.make() is not None)
        show_exports()

        def redraw_run(*_):
            with pn.io.hold():  # one message to the browser for all its changes
                run = self.last
                summary.object = self.summary()
                explain.object = self.explanation(run)
                explain.visible = run is not None
                for pane_, fn in ((private, self.private_partition_plot),
                                  (exact, self.exact_partition_plot), (hilbert, self.hilbert_plot)):
                    _show_plot(pane_, fn(run) if run is not None else None)
                estimate.objects = self._estimate_panes(run)
                estimate.visible = run is not None
                show_exports()

        def redraw_data(*_):
            with pn.io.hold():  # one message to the browser for all its changes
                data_pane.object = self.data_plot()
                data_info.object = self._data_text()
                summary.object = self.summary()

        # held and drawn on the event loop, never from the thread that set `last`
        self.param.watch(lambda *_: on_session_loop(redraw_run), "last")
        self.session.param.watch(
            lambda *_: self.gate.run("data", lambda: on_session_loop(redraw_data)), ["dataset"])
        self.session.param.watch(
            lambda *_: self.gate.run("summary", lambda: setattr(summary, "object", self.summary())),
            ["epsilon"])
        has_run = pn.bind(lambda run: run is not None, self.param.last)
        # each partition under its caption; the two side by side, one under the other when narrow
        pair = side_by_side(
            pn.Column(text("**Private** — what DAWA releases (stage 1, ε₁): its buckets, and x̂ "
                           "(noisy bucket totals spread uniformly).", visible=has_run),
                      private, self.exports["private-partition"], sizing_mode="stretch_width"),
            pn.Column(text("**Not private — for comparison only:** the exact least-cost "
                           "partition of x for the same ε₂, computed from the raw data.",
                           visible=has_run),
                      exact, self.exports["exact-partition"], sizing_mode="stretch_width"),
            basis=420)
        return pn.Column(
            data_info, data_pane, self.exports["data"], summary, pair, explain,
            estimate, self.exports["estimate"], hilbert, self.exports["hilbert"],
            loading=self.param.busy, sizing_mode="stretch_width")

    def _estimate_panes(self, run: DAWARun | None) -> list:
        """One pane per element of :meth:`estimate_plot` (side by side for 2D grids)."""
        if run is None:
            return []
        obj = self.estimate_plot(run)
        items = list(obj) if isinstance(obj, hv.Layout) else [obj]
        return [pn.pane.HoloViews(item, sizing_mode="stretch_width", height=360) for item in items]

    def _data_text(self) -> str:
        ds = self.current_dataset()
        if ds is None:
            return "**Dataset unavailable** (see the message)."
        return f"**{ds.name}** — {ds.description}\n\n{self.session.source_text(ds.name)}"

    def panel(self) -> pn.Column:
        """The whole page (built once per component)."""
        if self._layout is None:
            self._layout = pn.Column(
                pn.pane.Markdown(HEADER, sizing_mode="stretch_width"), self.error_alert(),
                side_by_side(self.controls(), self.results()), sizing_mode="stretch_width")
        return self._layout


def partition_explanation(run: DAWARun) -> str:
    """Markdown: why the private partition has its buckets, against the exact and the authors'
    (``run.published``) ones, both NOT private.  Stage 1 (Li et al., PVLDB 2014, Alg. 1, Remark
    after Thm 2) adds Laplace noise of scale ``(4 − 2/L)/ε₁`` to each candidate's cost ``dev + 1/ε₂``."""
    res, p, exact = run.result, run.result.partition, run.exact
    sizes = p.sizes
    singles = int(np.sum(sizes == 1))
    eps1, eps2 = res.epsilon1, res.epsilon2
    lo_scale, hi_scale = (float(s) for s in noise_scales(np.array([1, p.n]), eps1))
    cost = 1.0 / eps2
    many = p.k > 2 * exact.k
    lines = [
        "### What you see",
        f"DAWA's **private partition has {p.k:,} buckets** ({singles:,} of them single cells, "
        f"median size {float(np.median(sizes)):g} cell{'' if np.median(sizes) == 1 else 's'}); "
        f"the **exact least-cost partition** of the same data has **{exact.k:,}**.",
        "",
        ("**Why so many more.** " if many else "**Why they differ.** ")
        + f"Stage 1 picks the partition with the least *noisy* cost. A bucket costs its deviation "
        f"from its mean plus 1/ε₂ = {cost:.3g} counts (the noise its total will get), and every "
        f"candidate bucket's cost gets Laplace noise of scale {lo_scale:.3g} (single cells) to "
        f"{hi_scale:.3g} counts (long buckets) = (4 − 2/L)/ε₁ with ε₁ = {eps1:.3g}: "
        f"{lo_scale / cost:.2g}–{hi_scale / cost:.2g} times what a bucket costs. "
        "Summing noisy costs, the search prefers partitions made of buckets whose noise came out "
        "negative, and more, smaller buckets give it more draws to choose from"
        + (", so the partition follows the noise more than the data. " if many else
           "; here the penalty and ratio keep that effect small. ")
        + "That noise is what makes the partition ε₁-DP (the paper's Thm 2 needs it on every "
        "candidate bucket, single cells included).",
        "",
        f"**What brings it down.** A *penalty* (a public extra cost per bucket, in units of its "
        f"noise scale: privacy unchanged) or a larger *ratio* (more ε₁, less noise) gives fewer "
        f"buckets; this run used ratio {run.ratio:g}, penalty {run.penalty:g}. The registered "
        f"`dawa` of the Compare and Release pages uses ratio {DEFAULTS['ratio']:g}, penalty "
        f"{DEFAULTS['penalty']:g}, {DEFAULTS['candidates']} candidates and stage 2 "
        f"'{DEFAULT_SCALING}', chosen on DPBench histograms other than the paper's. Fewer "
        "buckets is not the goal in itself: x̂'s error is.",
    ]
    if run.published is not None:
        lines += [
            "",
            f"**The authors' code, NOT private.** Their public implementation draws about half this "
            f"noise, none on single cells, and never lets a noisy cost fall below 1/ε₂; on this "
            f"data and seed it gives **{run.published.k:,} buckets** (exact: {exact.k:,}). "
            "That is why the paper's published accuracy looks better than this page's, but that "
            "partition is not differentially private: the **Audit** page (*DAWA as published*) "
            "shows its privacy loss exceeding ε₁. It is computed here from the raw data for "
            "comparison only, like the exact partition; no release uses it.",
        ]
    return "\n".join(lines)
