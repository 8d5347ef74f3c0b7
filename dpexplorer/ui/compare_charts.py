"""The Compare page's charts and table contents, each a function of the page's numbers.

:func:`rmse_chart` (bars of the RMSE, the SVD bound as a line), :func:`table_patch`
(the cells an ε change alters), and :class:`CompareCharts`, mixed into
:class:`~dpexplorer.ui.compare_view.ComparePage`: every chart is a function of its
data alone (a DataFrame), so that the page can feed new numbers to a live plot
(:class:`~dpexplorer.ui.live_plot.LivePlot`) when only ε or δ changed, instead of
rebuilding the Bokeh figure.
"""

from __future__ import annotations

import math

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd

import dpexplorer as dpx

from .compare_tasks import EPS_GRID, OPTIMIZING

__all__ = ["CompareCharts", "rmse_chart", "table_patch", "TABLE_COLUMNS"]

#: Columns of the comparison shown in the table widget.
TABLE_COLUMNS = ["label", "rmse", "ratio", "online", "seconds", "description", "source", "note"]

def rmse_chart(df: pd.DataFrame, title: str = "", slots=()) -> hv.Overlay:
    """hv.Bars of the finite ``rmse`` per mechanism (log y), the SVD bound as an hv.HLine.

    ``df`` is a :func:`dpexplorer.compare` table (``attrs['svd_bound']``).
    ``slots``: labels kept on the axis without a bar yet (optimisers still
    running), so that their bars can fill in without rebuilding the plot.
    """
    ok = df[df["rmse"].notna() | df["label"].isin(list(slots))]
    bound = float(df.attrs.get("svd_bound", math.nan))
    bars = hv.Bars(
        ok, kdims=[hv.Dimension("label", label="Mechanism")],
        vdims=[hv.Dimension("rmse", label="RMSE (counts)"), "ratio"],
    ).opts(logy=True, tools=["hover"], color="#30a2da", responsive=True, height=360,
           title=title, xrotation=0, default_tools=["save", "reset"], framewise=True)
    values = list(ok["rmse"].dropna())
    if math.isfinite(bound) and bound > 0:
        values.append(bound)
    if values:
        bars = bars.opts(ylim=(min(values) / 1.5, max(values) * 1.5))
    if not (math.isfinite(bound) and bound > 0):
        return hv.Overlay([bars])
    # Constant labels: a live plot (hv.streams.Pipe) matches layers by label, so a
    # label carrying the value would add one more line at every ε change.
    line = hv.HLine(bound, label="SVD bound").opts(
        color="#d62728", line_dash="dashed", line_width=2)
    text = hv.Text(ok["label"].iloc[0] if len(ok) else "", bound * 1.15,
                   f"SVD bound {bound:.4g}", label="SVD bound").opts(
        text_color="#d62728", text_font_size="10pt", text_align="left")
    return (bars * line * text).opts(title=title, show_legend=False)  # the text names the line

def table_patch(old: pd.DataFrame | None, new: pd.DataFrame) -> dict | None:
    """The cells of ``old`` to change to make it ``new``, as ``Tabulator.patch`` takes them.

    ``old``, ``new``: comparison tables, ``(mechanisms, columns)`` (numbers in counts).
    Returns ``{column: [(index, value), ...]}`` when the two tables have the same rows, columns
    and text, and differ only in numbers (an ε change rescales the RMSE: the rows keep
    their order); ``{}`` when they are equal; ``None`` when the table must be replaced.
    A replaced table is sent whole and redrawn whole by the browser (every row with its
    description, source and note); a patch sends and redraws the changed cells only.
    NaN equals NaN here.
    """
    if (old is None or old.shape != new.shape or not old.columns.equals(new.columns)
            or not old.index.equals(new.index) or not old.dtypes.equals(new.dtypes)):
        return None
    patch = {}
    for col in new.columns:
        a, b = old[col], new[col]
        if b.dtype.kind not in "fiu":
            if not a.equals(b):
                return None
            continue
        x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
        changed = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        if changed.any():
            values = b.to_numpy()
            patch[col] = [(i, values[k].item()) for k, i in zip(np.flatnonzero(changed),
                                                                new.index[changed], strict=True)]
    return patch

def _empty_table() -> pd.DataFrame:
    empty = pd.DataFrame({c: pd.Series(dtype=float if c in ("rmse", "ratio", "seconds")
                                       else object) for c in TABLE_COLUMNS})
    empty.attrs.update(svd_bound=math.nan, noise="")
    return empty

def _hidden_unless(shown: bool) -> dict:
    """CSS of an element that keeps its place on the page and shows only when ``shown``."""
    return {} if shown else {"visibility": "hidden"}

def _limits(values, log: bool = False, pad: float = 1.5):
    """Axis limits around the finite (positive, on a log axis) ``values``; ``(None, None)`` if none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]
    if not v.size:
        return (None, None)
    lo, hi = float(v.min()), float(v.max())
    if log:
        return (lo / pad, hi * pad)
    if pad == 0:  # an index or a length: its own range, half a step of margin
        return (lo - 0.5, hi + 0.5)
    return (min(0.0, lo), hi * 1.08 if hi > 0 else 1.0)

def _sample(size: int, limit: int) -> np.ndarray:
    """Indices of at most ``limit`` evenly spaced rows out of ``size`` (first and last kept)."""
    return np.arange(size) if size <= limit else dpx.streaming.analysis.sampled_steps(size, limit)


class CompareCharts:
    """The Compare page's charts and summary (a mixin of :class:`ComparePage`)."""

    #: Points drawn in the per-query scatter plots (evenly spaced queries beyond it).
    max_points = 5000

    def bars(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """Bars of the analytic RMSE (log y) with the SVD bound line."""
        df = (self.table if self.table is not None else _empty_table()) if df is None else df
        a = df.attrs
        # short enough for the plot's width; the workload's name is in the summary above
        title = (f"RMSE per query: {a.get('m', 0):,} queries over n = {a.get('n', 0):,} cells"
                 if a.get("m") else "No result yet")
        if not df["rmse"].notna().any():
            return hv.Overlay([hv.Text(0.5, 0.5, "Computing…" if self.busy else "No result yet")
                               .opts(xaxis=None, yaxis=None, responsive=True, height=360,
                                     shared_axes=False, toolbar=None)])
        running = df.loc[df["note"] == OPTIMIZING, "label"] if "note" in df else []
        if "max_std" in df and df["max_std"].notna().any():
            # objective "max": bars of the worst query's std (the SVD bound bounds the RMSE only)
            worst = df.assign(rmse=df["max_std"])
            worst.attrs = dict(df.attrs, svd_bound=math.nan)
            title = title.replace("RMSE per query", "Largest per-query std")
            return rmse_chart(worst, title, slots=list(running)).opts(
                shared_axes=False, ylabel="worst query's std (counts)")
        return rmse_chart(df, title, slots=list(running)).opts(shared_axes=False)

    def curve_plot(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """RMSE over ε (log x, log y) per mechanism, the SVD bound dashed, the session's ε marked."""
        df = self.curve if df is None else df
        if df is None or df.empty:
            return hv.Overlay([hv.Curve([], "epsilon", "rmse")])
        eps = df.attrs.get("epsilon", self.session.epsilon)
        # the curves are drawn over the fixed ε grid, so that an ε change leaves them as they
        # are (and an optimiser's curve filling in changes only its own): each curve element
        # is kept while its numbers stay the same, and HoloViews sends only what changed
        grid = df[df["epsilon"].isin(EPS_GRID)]
        kept, elems = self._curve_layers, []
        for mech, part in grid.groupby("mechanism", sort=False):
            key = (part["label"].iloc[0], part["rmse"].to_numpy(dtype=float).tobytes())
            c = kept.get(mech, (None, None))
            if c[0] != key:
                curve = hv.Curve(part, hv.Dimension("epsilon", label="ε"),
                                 [hv.Dimension("rmse", label="RMSE (counts)")],
                                 label=key[0]).opts(
                    logx=True, logy=True, tools=["hover"], line_width=2, framewise=True)
                if mech == "svd_bound":
                    curve = curve.opts(color="#d62728", line_dash="dashed")
                c = (key, curve)
            elems.append((mech, c))
        self._curve_layers = dict(elems)
        now = df[df["epsilon"] == eps]
        marker = hv.Scatter(now, "epsilon", ["rmse", "label"], label="current ε").opts(
            color="black", size=7, tools=["hover"], framewise=True)
        layers = [c[1] for _, c in elems]
        # explicit limits: with live updates the axes must follow every frame
        return hv.Overlay([*layers, marker, hv.VLine(eps).opts(color="gray", line_width=1)]).opts(
            responsive=True, height=380, legend_position="right", logx=True, logy=True,
            shared_axes=False, ylim=_limits(df["rmse"], log=True),
            xlim=_limits(df["epsilon"], log=True, pad=1.2),
            title="Privacy–accuracy: RMSE over ε (the current ε is marked)")

    def per_query_sample(self, df: pd.DataFrame | None = None) -> pd.DataFrame:
        """The rows of ``per_query`` that are drawn (at most ``max_points``, evenly spaced)."""
        df = self.per_query if df is None else df
        if df is None:
            return pd.DataFrame({"query": [], "rmse": [], "length": []})
        out = df.iloc[_sample(len(df), self.max_points)]
        out.attrs = dict(df.attrs, total=len(df))
        return out

    def per_query_plot(self, sample: pd.DataFrame | None = None) -> hv.Scatter:
        """Per-query RMSE against the query index (hv.Scatter)."""
        s = self.per_query_sample() if sample is None else sample
        a = s.attrs
        note = f" ({len(s):,} of {a['total']:,} queries drawn)" if a.get("total", 0) > len(s) else ""
        return hv.Scatter(s, hv.Dimension("query", label="query index"),
                          [hv.Dimension("rmse", label="RMSE (counts)")]).opts(
            responsive=True, height=320, size=3, alpha=0.6, tools=["hover"], framewise=True,
            shared_axes=False, ylim=_limits(s["rmse"]), xlim=_limits(s["query"], pad=0),
            title=f"{a.get('label', '')}: per-query RMSE{note}")

    def length_plot(self, sample: pd.DataFrame | None = None) -> hv.Overlay:
        """Per-query RMSE against the range length, with the mean per length (range workloads)."""
        s = self.per_query_sample() if sample is None else sample
        a = s.attrs
        if "length" not in s or not len(s):
            return (hv.Scatter([], "length", "rmse") * hv.Curve([], "length", "rmse"))
        mean = a.get("mean_by_length")
        if mean is None:
            mean = s.groupby("length", sort=True)["rmse"].mean()
        note = f" ({len(s):,} of {a['total']:,} queries drawn)" if a.get("total", 0) > len(s) else ""
        return (hv.Scatter(s, hv.Dimension("length", label="range length"),
                           [hv.Dimension("rmse", label="RMSE (counts)"), "query"]).opts(
                    size=3, alpha=0.4, tools=["hover"], framewise=True)
                * hv.Curve((mean.index.to_numpy(), mean.to_numpy()), "length", "rmse",
                           label="mean over ranges of this length").opts(
                    color="black", line_width=2, framewise=True)).opts(
            responsive=True, height=320, legend_position="top_left", shared_axes=False,
            ylim=_limits(s["rmse"]), xlim=_limits(s["length"], pad=0),
            title=f"{a.get('label', '')}: per-query RMSE by range length{note}")

    def _summary(self) -> str:
        df = self.table
        if df is None:
            return "No result yet." if not self.busy else "Computing the first comparison…"
        best = df.dropna(subset=["rmse"])
        bound = self.svd_bound
        text = (f"**Workload** `{df.attrs.get('workload', '')}`: {df.attrs.get('m', 0):,} "
                f"queries over n = {df.attrs.get('n', 0):,} cells; **noise** "
                f"{df.attrs.get('noise', '')}; **SVD bound** " +
                (f"{bound:.4g}" if math.isfinite(bound) else
                 "not computable for this workload (it needs a dense n × n Gram matrix; "
                 "single Kronecker products and marginal workloads have closed forms)"))
        if "max_std" in df:
            worst = df.dropna(subset=["max_std"])
            if len(worst):
                text += (f"; **best worst-query std** {worst['label'].iloc[0]} "
                         f"({worst['max_std'].iloc[0]:.4g}, RMSE {worst['rmse'].iloc[0]:.4g})")
        elif len(best):
            ratio = best["ratio"].iloc[0]
            text += (f"; **best** {best['label'].iloc[0]} (RMSE {best['rmse'].iloc[0]:.4g}"
                     + (f", {ratio:.2f}× the bound)" if math.isfinite(ratio) else ")"))
        analytic = df[~df["data_dependent"].astype(bool)] if "data_dependent" in df else df
        skipped = analytic[analytic["rmse"].isna() & ~analytic["mechanism"].isin(self.pending)
                           & (analytic["note"] != OPTIMIZING)]
        if len(skipped):  # one reason once, with every mechanism it applies to
            reasons = skipped.groupby("note", sort=False)["label"].agg(", ".join)
            text += "\n\n**No analytic error:** " + "; ".join(
                f"{labels} — {note}" for note, labels in reasons.items())
        running = analytic[analytic["note"] == OPTIMIZING]
        if len(running):
            text += ("\n\n**Optimising** (rows fill in when built): "
                     + ", ".join(running["label"]) + ".")
        if self.pending:
            labels = ", ".join(dpx.registry.get(n).label for n in self.pending
                               if n in dpx.registry.REGISTRY)
            text += f"\n\n**Optimisers not run yet:** {labels}."
        return text

    def _table_value(self) -> pd.DataFrame:
        df = self.table if self.table is not None else _empty_table()
        if "max_std" in df:  # the worst query's std beside the RMSE (objective "max")
            return df[TABLE_COLUMNS[:2] + ["max_std"] + TABLE_COLUMNS[2:]]
        return df[TABLE_COLUMNS]

    def _pq_sample_with_means(self) -> pd.DataFrame:
        s = self.per_query_sample()
        df = self.per_query
        if df is not None and "length" in df and "mean_by_length" not in s.attrs:
            s.attrs["mean_by_length"] = df.groupby("length", sort=True)["rmse"].mean()
        return s

    def _plot_key(self):
        """What fixes the structure of the bars and curve plots: the comparison and its bars.

        Optimisers still running keep a slot (a label without a bar, a curve
        without points), so their results update the plots in place.
        """
        if self._shown is None or self.table is None:
            return None
        t = self.table
        drawn = t["mechanism"][t["rmse"].notna() | (t["note"] == OPTIMIZING)]
        return (self._shown, tuple(sorted(drawn)))

    def _target_key(self):
        """What fixes the structure of the target charts: the comparison, metric and mechanisms."""
        t = self.accuracy_first.table
        if self._shown is None or t is None:
            return None
        drawn = t["mechanism"][np.isfinite(t["epsilon"].to_numpy(dtype=float))]
        return (self._shown, t.attrs.get("metric"), tuple(sorted(drawn)))

    def _pq_view_key(self):
        df = self.per_query
        if df is None:
            return None
        return (df.attrs.get("workload_id"), df.attrs.get("mechanism"), df.attrs.get("norm"))
