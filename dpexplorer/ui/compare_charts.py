"""The Compare page's charts and table contents (:class:`CompareCharts`, a mixin of
:class:`~dpexplorer.ui.compare_view.ComparePage`): each chart a function of its data alone, so that
a live plot (:class:`~dpexplorer.ui.live_plot.LivePlot`) takes new numbers when only ε or δ changed.
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
_RMSE = hv.Dimension("rmse", label="RMSE (counts)")


def rmse_chart(df: pd.DataFrame, title: str = "", slots=()) -> hv.Overlay:
    """Bars of the finite ``rmse`` of a :func:`dpexplorer.compare` table ``df`` (log y), its
    ``attrs['svd_bound']`` as a line; ``slots``: labels kept on the axis without a bar yet
    (optimisers running), so that their bars fill in without rebuilding the plot."""
    ok = df[df["rmse"].notna() | df["label"].isin(list(slots))]
    bound = float(df.attrs.get("svd_bound", math.nan))
    has_bound = math.isfinite(bound) and bound > 0
    mechanism = hv.Dimension("label", label="Mechanism")
    bars = hv.Bars(ok, kdims=[mechanism], vdims=[_RMSE, "ratio"]).opts(
        logy=True, tools=["hover"], color="#30a2da", responsive=True, height=360,
        title=title, xrotation=0, default_tools=["save", "reset"], framewise=True)
    values = list(ok["rmse"].dropna()) + ([bound] if has_bound else [])
    if values:
        bars = bars.opts(ylim=(min(values) / 1.5, max(values) * 1.5))
    if not has_bound:
        return hv.Overlay([bars])
    # constant labels: a live plot matches layers by label (a value in it adds a line per ε)
    line = hv.HLine(bound, label="SVD bound").opts(
        color="#d62728", line_dash="dashed", line_width=2)
    text = hv.Text(ok["label"].iloc[0] if len(ok) else "", bound * 1.15,
                   f"SVD bound {bound:.4g}", label="SVD bound").opts(
        text_color="#d62728", text_font_size="10pt", text_align="left")
    return (bars * line * text).opts(title=title, show_legend=False)  # the text names the line


def table_patch(old: pd.DataFrame | None, new: pd.DataFrame) -> dict | None:
    """The cells of ``old`` to change to make it ``new`` (comparison tables, ``(mechanisms,
    columns)``) as ``Tabulator.patch`` takes them, ``{column: [(index, value), ...]}``, when only
    numbers differ (an ε change; NaN equals NaN); ``{}`` if equal; ``None`` to replace the table."""
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


def _limits(values, log: bool = False, pad: float = 1.5):
    """Axis limits around the finite (log: positive) ``values``; ``(None, None)`` if none."""
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


def _drawn(s: pd.DataFrame) -> str:
    """The title's note on a sampled per-query plot: how many queries it draws."""
    total = s.attrs.get("total", 0)
    return f" ({len(s):,} of {total:,} queries drawn)" if total > len(s) else ""


class CompareCharts:
    """The Compare page's charts and summary (a mixin of :class:`ComparePage`)."""

    #: Points drawn in the per-query scatter plots (evenly spaced queries beyond it).
    max_points = 5000

    def bars(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """Bars of the analytic RMSE (log y) with the SVD bound line."""
        df = self._full_table() if df is None else df
        a = df.attrs
        # short enough for the plot's width; the workload's name is in the summary above
        title = (f"RMSE per query: {a.get('m', 0):,} queries over n = {a.get('n', 0):,} cells"
                 if a.get("m") else "No result yet")
        if not df["rmse"].notna().any():
            return hv.Overlay([hv.Text(0.5, 0.5, "Computing…" if self.busy else "No result yet")
                               .opts(xaxis=None, yaxis=None, responsive=True, height=360,
                                     shared_axes=False, toolbar=None)])
        running = list(df.loc[df["note"] == OPTIMIZING, "label"]) if "note" in df else []
        if "max_std" in df and df["max_std"].notna().any():
            # objective "max": bars of the worst query's std (the SVD bound bounds the RMSE only)
            worst = df.assign(rmse=df["max_std"])
            worst.attrs = dict(df.attrs, svd_bound=math.nan)
            title = title.replace("RMSE per query", "Largest per-query std")
            return rmse_chart(worst, title, slots=running).opts(
                shared_axes=False, ylabel="worst query's std (counts)")
        return rmse_chart(df, title, slots=running).opts(shared_axes=False)

    def curve_plot(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """RMSE over ε (log x, log y) per mechanism, the SVD bound dashed, the session's ε marked."""
        df = self.curve if df is None else df
        if df is None or df.empty:
            return hv.Overlay([hv.Curve([], "epsilon", "rmse")])
        eps = df.attrs.get("epsilon", self.session.epsilon)
        # drawn over the fixed ε grid and each curve element kept while its numbers stay the
        # same, so that HoloViews sends only what changed
        layers = {}
        for mech, part in df[df["epsilon"].isin(EPS_GRID)].groupby("mechanism", sort=False):
            key = (part["label"].iloc[0], part["rmse"].to_numpy(dtype=float).tobytes())
            layers[mech] = self._curve_layers.get(mech, (None, None))
            if layers[mech][0] != key:
                curve = hv.Curve(part, hv.Dimension("epsilon", label="ε"), [_RMSE],
                                 label=key[0]).opts(
                    logx=True, logy=True, tools=["hover"], line_width=2, framewise=True)
                if mech == "svd_bound":
                    curve = curve.opts(color="#d62728", line_dash="dashed")
                layers[mech] = (key, curve)
        self._curve_layers = layers
        marker = hv.Scatter(df[df["epsilon"] == eps], "epsilon", ["rmse", "label"],
                            label="current ε").opts(
            color="black", size=7, tools=["hover"], framewise=True)
        # explicit limits: with live updates the axes must follow every frame
        return hv.Overlay([*(c for _, c in layers.values()), marker,
                           hv.VLine(eps).opts(color="gray", line_width=1)]).opts(
            responsive=True, height=380, legend_position="right", logx=True, logy=True,
            shared_axes=False, ylim=_limits(df["rmse"], log=True),
            xlim=_limits(df["epsilon"], log=True, pad=1.2),
            title="Privacy–accuracy: RMSE over ε (the current ε is marked)")

    def per_query_sample(self, df: pd.DataFrame | None = None) -> pd.DataFrame:
        """The rows of ``per_query`` that are drawn (at most ``max_points``, evenly spaced)."""
        df = self.per_query if df is None else df
        if df is None:
            return pd.DataFrame({"query": [], "rmse": [], "length": []})
        size = len(df)
        rows = (np.arange(size) if size <= self.max_points
                else dpx.streaming.analysis.sampled_steps(size, self.max_points))
        out = df.iloc[rows]
        out.attrs = dict(df.attrs, total=size)
        if "length" in df and "mean_by_length" not in out.attrs:  # over every query
            out.attrs["mean_by_length"] = df.groupby("length", sort=True)["rmse"].mean()
        return out

    def per_query_plot(self, sample: pd.DataFrame | None = None) -> hv.Scatter:
        """Per-query RMSE against the query index (hv.Scatter)."""
        s = self.per_query_sample() if sample is None else sample
        return hv.Scatter(s, hv.Dimension("query", label="query index"), [_RMSE]).opts(
            responsive=True, height=320, size=3, alpha=0.6, tools=["hover"], framewise=True,
            shared_axes=False, ylim=_limits(s["rmse"]), xlim=_limits(s["query"], pad=0),
            title=f"{s.attrs.get('label', '')}: per-query RMSE{_drawn(s)}")

    def length_plot(self, sample: pd.DataFrame | None = None) -> hv.Overlay:
        """Per-query RMSE against the range length, with the mean per length (range workloads)."""
        s = self.per_query_sample() if sample is None else sample
        if "length" not in s or not len(s):
            return (hv.Scatter([], "length", "rmse") * hv.Curve([], "length", "rmse"))
        mean = s.attrs.get("mean_by_length")
        if mean is None:
            mean = s.groupby("length", sort=True)["rmse"].mean()
        return (hv.Scatter(s, hv.Dimension("length", label="range length"), [_RMSE, "query"]).opts(
                    size=3, alpha=0.4, tools=["hover"], framewise=True)
                * hv.Curve((mean.index.to_numpy(), mean.to_numpy()), "length", "rmse",
                           label="mean over ranges of this length").opts(
                    color="black", line_width=2, framewise=True)).opts(
            responsive=True, height=320, legend_position="top_left", shared_axes=False,
            ylim=_limits(s["rmse"]), xlim=_limits(s["length"], pad=0),
            title=f"{s.attrs.get('label', '')}: per-query RMSE by range length{_drawn(s)}")

    def _summary(self) -> str:
        df = self.table
        if df is None:
            return "No result yet." if not self.busy else "Computing the first comparison…"
        a, bound = df.attrs, self.svd_bound
        text = (f"**Workload** `{a.get('workload', '')}`: {a.get('m', 0):,} queries over "
                f"n = {a.get('n', 0):,} cells; **noise** {a.get('noise', '')}; **SVD bound** " +
                (f"{bound:.4g}" if math.isfinite(bound) else
                 "not computable for this workload (it needs a dense n × n Gram matrix; "
                 "single Kronecker products and marginal workloads have closed forms)"))
        best = df.dropna(subset=["max_std" if "max_std" in df else "rmse"])
        if len(best):
            top = best.iloc[0]
            if "max_std" in df:
                text += (f"; **best worst-query std** {top['label']} "
                         f"({top['max_std']:.4g}, RMSE {top['rmse']:.4g})")
            else:
                text += (f"; **best** {top['label']} (RMSE {top['rmse']:.4g}" +
                         (f", {top['ratio']:.2f}× the bound)" if math.isfinite(top["ratio"])
                          else ")"))
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

    def _full_table(self) -> pd.DataFrame:
        """:attr:`table`, or an empty table with its columns before the first comparison."""
        if self.table is not None:
            return self.table
        empty = pd.DataFrame({c: pd.Series(dtype=float if c in ("rmse", "ratio", "seconds")
                                           else object) for c in TABLE_COLUMNS})
        empty.attrs.update(svd_bound=math.nan, noise="")
        return empty

    def _table_value(self) -> pd.DataFrame:
        """The columns of :meth:`_full_table` that the table widget shows."""
        df = self._full_table()
        if "max_std" in df:  # the worst query's std beside the RMSE (objective "max")
            return df[TABLE_COLUMNS[:2] + ["max_std"] + TABLE_COLUMNS[2:]]
        return df[TABLE_COLUMNS]

    def _plot_key(self):
        """What fixes the bars and curve plots' structure: the comparison and its bars (running
        optimisers keep a slot)."""
        if self._shown is None or self.table is None:
            return None
        t = self.table
        drawn = t["mechanism"][t["rmse"].notna() | (t["note"] == OPTIMIZING)]
        return (self._shown, tuple(sorted(drawn)))

    def _pq_view_key(self):
        df = self.per_query
        return None if df is None else tuple(map(df.attrs.get, ("workload_id", "mechanism", "norm")))
