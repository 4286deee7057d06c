"""Pure chart builders: DataFrame in, plotly Figure out (no Streamlit, no I/O). Names that
come from a results file or a server (run labels, run ids, /stats keys) go in as plain text,
through `_run_name` or `literal.plotly`."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from explorer import literal

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf"]


CONCURRENCY, USERS = "concurrency C", "users U"


def _run_name(labels: dict[str, str], run_id: str) -> str:
    """A run's legend name, shown as typed: its label (`explorer.ui.run_labels`, its parts
    already short), else its id on one short line."""
    return literal.plotly(labels[run_id] if run_id in labels else literal.shorten(str(run_id)))


def level_title(run_ids: Collection[str], users: Collection[str]) -> str:
    """The level axis of these runs: concurrency C, users U (every run a users run) or both."""
    chosen = set(run_ids)
    if chosen and chosen <= set(users):
        return USERS
    return f"{CONCURRENCY} / {USERS}" if chosen & set(users) else CONCURRENCY


def _log2_axis(fig: go.Figure, values: pd.Series, title: str = CONCURRENCY) -> None:
    ticks = sorted({int(v) for v in values.dropna()})
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks], title=title)


PROBE_NAME = "probe level (run --search)"


BAND_NAMES = {"bootstrap": "95% interval", "range": "range over repeats"}


def _rgba(color: str, alpha: float) -> str:
    r, g, b = (int(color[k:k + 2], 16) for k in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _band(fig: go.Figure, band: pd.DataFrame, color: str, name: str, group: str,
          letter: str = "C") -> None:
    """A shaded band between `low` and `high` per C: an invisible lower edge, then the upper
    edge filled down to it; the legend and hover say what the band is."""
    band = band.sort_values("concurrency")
    methods = [BAND_NAMES.get(m, m) for m in band["method"]]
    kind = " / ".join(dict.fromkeys(methods))
    fig.add_trace(go.Scatter(x=band["concurrency"], y=band["low"], mode="lines",
                             line={"width": 0, "color": color}, showlegend=False,
                             legendgroup=group, hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=band["concurrency"], y=band["high"], mode="lines", fill="tonexty",
        fillcolor=_rgba(color, 0.18), line={"width": 0, "color": color},
        name=f"{name}: {kind}", legendgroup=group,
        customdata=list(zip(band["low"], band["high"], methods, strict=True)),
        hovertemplate=letter + "=%{x}<br>%{customdata[2]}: %{customdata[0]:.1f} to "
                      "%{customdata[1]:.1f}<extra>%{fullData.name}</extra>"))


def metric_vs_c(levels: pd.DataFrame, y: str, target: float, target_label: str,
                passing: set[tuple[str, int]], y_title: str, labels: dict[str, str],
                bands: pd.DataFrame | None = None, users: Collection[str] = ()) -> go.Figure:
    """One line per run; filled markers where the level meets every target, hollow where not;
    diamonds for the levels `run --search` probed, so the search's work shows. `bands`
    (run_id, concurrency, low, high, method: "bootstrap" or "range"), where a run has repeats,
    shades its 95% interval or its range over repeats around the line. `users`: the runs whose
    levels are user counts U (`--mode users`), named so in the legend, hover and axis."""
    fig = go.Figure()
    probes = levels["probe"].eq(True) if "probe" in levels else pd.Series(False, levels.index)
    by_run = ({r: f for r, f in bands.groupby("run_id", sort=False)}
              if bands is not None and not bands.empty else {})
    for i, (run_id, frame) in enumerate(levels.groupby("run_id", sort=False)):
        frame = frame.sort_values("concurrency")
        ok = [(run_id, int(c)) in passing for c in frame["concurrency"]]
        probe = probes[frame.index].tolist()
        color = PALETTE[i % len(PALETTE)]
        published = "source" in frame and (frame["source"] == "published").all()
        letter = "U" if run_id in users else "C"
        if run_id in by_run:
            _band(fig, by_run[run_id], color, literal.plotly(literal.shorten(str(run_id))),
                  str(run_id), letter)
        fig.add_trace(go.Scatter(
            x=frame["concurrency"], y=frame[y], mode="lines+markers",
            name=_run_name(labels, run_id) + (" (users)" if run_id in users else ""),
            line={"color": color, "dash": "dot" if published else "solid"},
            marker={"size": [14 if p else 11 for p in probe], "color": color,
                    "line": {"color": color, "width": 2},
                    "symbol": [("diamond" if p else "circle") + ("" if k else "-open")
                               for p, k in zip(probe, ok, strict=True)]},
            customdata=[["passes" if k else "fails", " · probe" if p else ""]
                        for p, k in zip(probe, ok, strict=True)],
            hovertemplate=letter + "=%{x}<br>%{y:.1f}<br>%{customdata[0]}%{customdata[1]}"
                                   "<extra>%{fullData.name}</extra>",
        ))
    if probes.any():  # a legend key for the diamonds
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=PROBE_NAME,
                                 marker={"symbol": "diamond", "size": 12, "color": "grey"}))
    _mark_client_bound(fig, levels, [y])
    fig.add_hline(y=target, line={"color": "grey", "dash": "dash"},
                  annotation_text=target_label, annotation_position="top left")
    _log2_axis(fig, levels["concurrency"], level_title(levels["run_id"].unique(), users))
    fig.update_layout(yaxis_title=y_title, legend={"orientation": "h", "y": -0.25},
                      margin={"t": 30, "b": 10}, height=420)
    return fig


CLIENT_BOUND_NAME = "client-bound level (the harness was the limit)"


def _mark_client_bound(fig: go.Figure, levels: pd.DataFrame, columns: list[str]) -> None:
    """A red cross over each point of a level whose self-check found the harness the limit:
    its figures may be late by up to its loop lag (in the hover)."""
    if "client_bound" not in levels:
        return
    bound = levels[levels["client_bound"].eq(True)]
    if bound.empty:
        return
    lag = bound["loop_lag_p99_ms"] if "loop_lag_p99_ms" in bound else pd.Series(None, bound.index)
    for n, column in enumerate(c for c in columns if c in bound):
        fig.add_trace(go.Scatter(
            x=bound["concurrency"], y=bound[column], mode="markers", name=CLIENT_BOUND_NAME,
            legendgroup="client-bound", showlegend=n == 0,
            marker={"symbol": "x-thin", "size": 18, "line": {"width": 3, "color": "#d62728"}},
            customdata=lag.tolist(),
            hovertemplate="C=%{x}: client-bound, loop lag p99 %{customdata:.1f} ms"
                          "<extra></extra>"))


def figures_vs_c(levels: pd.DataFrame, columns: dict[str, str], y_title: str,
                 labels: dict[str, str], users: Collection[str] = ()) -> go.Figure:
    """Several figures of each run against C (TPOT and ITL percentiles, say): a color per run,
    a dash per figure; client-bound levels marked."""
    fig = go.Figure()
    dashes = ("solid", "dot", "dash", "longdash", "dashdot")
    letter = "U" if set(levels["run_id"]) <= set(users) and len(users) else "C"
    for i, (run_id, frame) in enumerate(levels.groupby("run_id", sort=False)):
        frame = frame.sort_values("concurrency")
        for k, (column, name) in enumerate(columns.items()):
            if column not in frame or frame[column].isna().all():
                continue
            fig.add_trace(go.Scatter(
                x=frame["concurrency"], y=frame[column], mode="lines+markers",
                name=f"{_run_name(labels, run_id)}: {name}",
                line={"color": PALETTE[i % len(PALETTE)], "dash": dashes[k % len(dashes)]},
                hovertemplate=letter + "=%{x}<br>%{y:.2f}<extra>%{fullData.name}</extra>"))
    _mark_client_bound(fig, levels, list(columns))
    _log2_axis(fig, levels["concurrency"], level_title(levels["run_id"].unique(), users))
    fig.update_layout(yaxis_title=y_title, legend={"orientation": "h", "y": -0.25},
                      margin={"t": 30, "b": 10}, height=420)
    return fig


def request_timeline(requests: pd.DataFrame, chunks: pd.DataFrame,
                     client_bound: bool = False) -> go.Figure:
    """One bar per request (`--token-times`): waiting for the first token, then streaming to
    the last, each chunk a tick where it arrived; times from the level's first send."""
    frame = requests.reset_index(drop=True)
    names = [f"r{r} w{w}" for r, w in zip(frame["round"], frame["worker"], strict=True)]
    ttft = frame["ttft_ms"].fillna(frame["latency_ms"]).fillna(0.0)
    stream = (frame["latency_ms"].fillna(0.0) - ttft).clip(lower=0.0)
    fig = go.Figure()
    fig.add_trace(go.Bar(y=names, x=ttft, base=frame["sent_ms"], orientation="h",
                         name="send to first token", marker={"color": "#c7c7c7"},
                         hovertemplate="%{y}: TTFT %{x:.1f} ms<extra></extra>"))
    fig.add_trace(go.Bar(y=names, x=stream, base=frame["sent_ms"] + ttft, orientation="h",
                         name="first to last token", marker={"color": PALETTE[0]},
                         hovertemplate="%{y}: streaming %{x:.1f} ms<extra></extra>"))
    if not chunks.empty:
        row = dict(zip(frame["request_id"], names, strict=True))
        fig.add_trace(go.Scatter(
            x=chunks["at_ms"], y=chunks["request_id"].map(row), mode="markers",
            name="chunk (its tokens in the hover)",
            marker={"symbol": "line-ns-open", "size": 9, "color": "#111111"},
            customdata=chunks["tokens"].fillna(-1).astype(int).tolist(),
            hovertemplate="%{x:.1f} ms: %{customdata} token(s)<extra></extra>"))
    title = "client-bound level: times may be late by the loop lag" if client_bound else None
    fig.update_layout(barmode="overlay", xaxis_title="ms since the level's first send",
                      yaxis={"autorange": "reversed", "title": "request (round, worker)"},
                      legend={"orientation": "h", "y": -0.3}, title=title,
                      height=max(320, 18 * len(frame) + 140), margin={"t": 40, "b": 10})
    return fig


def ttft_sources(frame: pd.DataFrame) -> go.Figure:
    """The client's TTFT against the server's own (its histogram) per level: the gap is what
    lies between them (network, HTTP, the harness); the server's queue time shows how much of
    its TTFT was waiting for a slot."""
    fig = go.Figure()
    lines = (("mean_ttft_ms", "client TTFT mean", 0, "solid"),
             ("p50_ttft_ms", "client TTFT p50", 0, "dot"),
             ("ttft_mean_ms", "server TTFT mean", 1, "solid"),
             ("ttft_p50_ms", "server TTFT p50", 1, "dot"),
             ("queue_time_mean_ms", "server queue time mean", 2, "solid"))
    for column, name, color, dash in lines:
        if column in frame and frame[column].notna().any():
            fig.add_trace(go.Scatter(
                x=frame["concurrency"], y=frame[column], mode="lines+markers", name=name,
                line={"color": PALETTE[color], "dash": dash},
                hovertemplate="C=%{x}<br>%{y:.1f} ms<extra>%{fullData.name}</extra>"))
    _log2_axis(fig, frame["concurrency"])
    fig.update_layout(yaxis_title="TTFT (ms)", legend={"orientation": "h", "y": -0.25},
                      margin={"t": 30, "b": 10}, height=420)
    return fig


def server_metric_vs_c(figures: pd.DataFrame, column: str, y_title: str,
                       labels: dict[str, str]) -> go.Figure:
    """One server figure against C, one line per run that has it."""
    fig = go.Figure()
    for i, (run_id, frame) in enumerate(figures.groupby("run_id", sort=False)):
        if column not in frame or frame[column].isna().all():
            continue
        frame = frame.sort_values("concurrency")
        fig.add_trace(go.Scatter(
            x=frame["concurrency"], y=frame[column], mode="lines+markers",
            name=_run_name(labels, run_id), line={"color": PALETTE[i % len(PALETTE)]},
            hovertemplate="C=%{x}<br>%{y:.3g}<extra>%{fullData.name}</extra>"))
    _log2_axis(fig, figures["concurrency"])
    fig.update_layout(yaxis_title=y_title, legend={"orientation": "h", "y": -0.25},
                      margin={"t": 30, "b": 10}, height=420)
    return fig


def distribution(stats: pd.DataFrame, y_title: str, by_rate: bool = False,
                 users: bool = False) -> go.Figure:
    """Per-level box plots from quantiles computed in SQL (min, q1, median, q3, max); levels
    are the `rate` column (req/s) instead of `concurrency` for a rate run, user counts U for
    a users run."""
    fig = go.Figure()
    letter = "U" if users else "C"
    for row in stats.itertuples():
        level = f"{row.rate:g}" if by_rate else str(row.concurrency)
        fig.add_trace(go.Box(
            x=[level], q1=[row.q1], median=[row.med], q3=[row.q3],
            lowerfence=[row.lo], upperfence=[row.hi], mean=[row.mean],
            name=f"R={level} req/s" if by_rate else f"{letter}={level}", showlegend=False,
            boxpoints=False,
        ))
    fig.update_layout(xaxis_title="request rate (req/s)" if by_rate else
                      USERS if users else CONCURRENCY,
                      yaxis_title=y_title, height=360, margin={"t": 20, "b": 10},
                      xaxis_type="category")
    return fig


def first_vs_rest(frame: pd.DataFrame, y: str, y_title: str, users: bool = False
                  ) -> go.Figure:
    fig = go.Figure()
    for name, part in frame.groupby("rounds"):
        fig.add_trace(go.Bar(x=part["concurrency"].astype(str), y=part[y], name=str(name)))
    fig.update_layout(barmode="group", xaxis_title=USERS if users else CONCURRENCY,
                      yaxis_title=y_title,
                      height=320, margin={"t": 20, "b": 10}, xaxis_type="category")
    return fig


def step_breakdown(parts: pd.DataFrame) -> go.Figure:
    """Stacked bars per level: each part's share of the engine's step time, the unaccounted
    remainder included (grey), so a slower placement shows where its time went."""
    fig = go.Figure()
    levels = [str(c) for c in sorted(parts["concurrency"].unique())]
    for i, (part, frame) in enumerate(parts.groupby("part", sort=False)):
        fig.add_trace(go.Bar(
            x=frame["concurrency"].astype(str), y=frame["share"] * 100,
            name=literal.plotly(literal.shorten(str(part))),
            marker_color="#bbbbbb" if part == "unaccounted" else PALETTE[i % len(PALETTE)],
            customdata=frame["ms"],
            hovertemplate="C=%{x}<br>%{y:.1f}% of step time<br>%{customdata:,.0f} ms"
                          "<extra>%{fullData.name}</extra>",
        ))
    fig.update_layout(barmode="relative", xaxis_title="concurrency C", xaxis_type="category",
                      xaxis={"categoryorder": "array", "categoryarray": levels},
                      yaxis_title="share of engine step time (%)", height=380,
                      legend={"orientation": "h", "y": -0.3}, margin={"t": 20, "b": 10})
    return fig


def percent_difference(levels: pd.DataFrame, baseline: str, labels: dict[str, str],
                       users: Collection[str] = ()) -> tuple[go.Figure, pd.DataFrame]:
    """Per-C difference of each run against the baseline run, in percent (TPS and TTFT);
    `users`: the runs whose levels are user counts U."""
    base = levels[levels["run_id"] == baseline].set_index("concurrency")
    rows = []
    for run_id, frame in levels[levels["run_id"] != baseline].groupby("run_id", sort=False):
        for row in frame.itertuples():
            if row.concurrency not in base.index:
                continue
            ref = base.loc[row.concurrency]
            rows.append({
                "run_id": run_id, "concurrency": int(row.concurrency),
                "tps_diff_pct": _pct(row.mean_tps, ref["mean_tps"]),
                "ttft_diff_pct": _pct(row.mean_ttft_ms, ref["mean_ttft_ms"]),
            })
    diff = pd.DataFrame(rows, columns=["run_id", "concurrency", "tps_diff_pct",
                                       "ttft_diff_pct"])
    fig = go.Figure()
    for i, (run_id, frame) in enumerate(diff.groupby("run_id", sort=False)):
        color = PALETTE[(i + 1) % len(PALETTE)]
        name = _run_name(labels, run_id)
        fig.add_trace(go.Bar(x=frame["concurrency"].astype(str), y=frame["tps_diff_pct"],
                             name=f"TPS: {name}", marker_color=color))
        fig.add_trace(go.Bar(x=frame["concurrency"].astype(str), y=frame["ttft_diff_pct"],
                             name=f"TTFT: {name}", marker_color=color, opacity=0.45))
    fig.add_hline(y=0, line={"color": "black", "width": 1})
    fig.update_layout(barmode="group", xaxis_type="category",
                      xaxis_title=level_title(levels["run_id"].unique(), users),
                      yaxis_title="difference vs baseline (%)",
                      height=380, legend={"orientation": "h", "y": -0.3},
                      margin={"t": 20, "b": 10})
    return fig, diff


def _pct(value: float, ref: float) -> float | None:
    if value is None or ref is None or pd.isna(value) or pd.isna(ref) or ref == 0:
        return None
    return (value / ref - 1) * 100


def sizing_budget(report: dict) -> go.Figure:
    """Stacked bars: what each tier must hold per node, against the node's memory."""
    fig = go.Figure()
    tiers = ["GPU / unified memory", "host RAM / NVMe"]
    for i, (name, gb) in enumerate(report["required_items_gb"].items()):
        fig.add_trace(go.Bar(x=[tiers[0]], y=[gb], name=name,
                             marker_color=PALETTE[i % len(PALETTE)]))
    for name, gb in report["offload_items_gb"].items():
        fig.add_trace(go.Bar(x=[tiers[1]], y=[gb], name=f"offloaded: {name}"))
    fig.add_hline(y=report["memory_gb_per_node"], line={"color": "red", "dash": "dash"},
                  annotation_text=f"{report['memory_gb_per_node']:g} GB per node")
    fig.update_layout(barmode="stack", yaxis_title="GB per node", height=420,
                      margin={"t": 30, "b": 10})
    return fig


LAG_LIMITED_NAME = "send lag > 10 ms (generator-limited)"


def metric_vs_rate(levels: pd.DataFrame, y: str, target: float, target_label: str,
                   passing: set[tuple[str, float]], y_title: str, labels: dict[str, str],
                   lag_limited: Collection[tuple[str, float]] = frozenset()) -> go.Figure:
    """A rate run's figure against the request rate (req/s), one line per run: filled markers
    where the level meets every target, hollow where not, an x where the load generator set
    the pace (p99 send lag over the limit)."""
    fig = go.Figure()
    for i, (run_id, frame) in enumerate(levels.groupby("run_id", sort=False)):
        frame = frame.sort_values("rate")
        rates = [float(r) for r in frame["rate"]]
        ok = [(run_id, r) in passing for r in rates]
        lagged = [(run_id, r) in lag_limited for r in rates]
        lag = (frame["p99_send_lag_ms"].tolist() if "p99_send_lag_ms" in frame
               else [None] * len(frame))
        color = PALETTE[i % len(PALETTE)]
        fig.add_trace(go.Scatter(
            x=rates, y=frame[y], mode="lines+markers", name=_run_name(labels, run_id),
            line={"color": color},
            marker={"size": 11, "color": color, "line": {"color": color, "width": 2},
                    "symbol": [("x" if g else "circle") + ("" if k else "-open")
                               for g, k in zip(lagged, ok, strict=True)]},
            customdata=[["passes" if k else "fails",
                         "-" if v is None or pd.isna(v) else f"{v:.2f}"]
                        for k, v in zip(ok, lag, strict=True)],
            hovertemplate="R=%{x} req/s<br>%{y:.1f}<br>%{customdata[0]}"
                          "<br>p99 send lag %{customdata[1]} ms<extra>%{fullData.name}</extra>",
        ))
    if lag_limited:  # a legend key for the x markers
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=LAG_LIMITED_NAME,
                                 marker={"symbol": "x", "size": 12, "color": "grey"}))
    fig.add_hline(y=target, line={"color": "grey", "dash": "dash"},
                  annotation_text=target_label, annotation_position="top left")
    ticks = sorted({float(r) for r in levels["rate"].dropna()})
    fig.update_xaxes(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                     title="request rate (req/s)", rangemode="tozero")
    fig.update_layout(yaxis_title=y_title, legend={"orientation": "h", "y": -0.25},
                      margin={"t": 30, "b": 10}, height=420)
    return fig


def duty_cycle_vs_users(levels: pd.DataFrame, target: float | None, labels: dict[str, str]
                        ) -> go.Figure:
    """A users run's measured duty cycle (the share of the users' time with a request
    running) against U, one line per run, with the profile's target duty cycle dashed."""
    fig = go.Figure()
    for i, (run_id, frame) in enumerate(levels.groupby("run_id", sort=False)):
        frame = frame.sort_values("concurrency")
        fig.add_trace(go.Scatter(
            x=frame["concurrency"], y=frame["duty_cycle"], mode="lines+markers",
            name=_run_name(labels, run_id), line={"color": PALETTE[i % len(PALETTE)]},
            hovertemplate="U=%{x}<br>duty cycle %{y:.2f}<extra>%{fullData.name}</extra>"))
    if target is not None:
        fig.add_hline(y=target, line={"color": "grey", "dash": "dash"},
                      annotation_text=f"target duty cycle {target:.2f}",
                      annotation_position="top left")
    _log2_axis(fig, levels["concurrency"], USERS)
    fig.update_layout(yaxis_title="duty cycle (measured)", yaxis_rangemode="tozero",
                      legend={"orientation": "h", "y": -0.25}, margin={"t": 30, "b": 10},
                      height=360)
    return fig


def ttft_vs_context(turns: pd.DataFrame, users: bool = False) -> go.Figure:
    """A multi-turn run's mean TTFT against the context each turn sent (mean prompt tokens),
    one line per level with a marker per turn; the cached prompt tokens the server reported
    are a dotted line of the same colour on the right axis."""
    fig = go.Figure()
    letter = "U" if users else "C"
    for i, (level, frame) in enumerate(turns.groupby("concurrency", sort=True)):
        frame = frame.sort_values("turn")
        color = PALETTE[i % len(PALETTE)]
        name = f"{letter}={int(level)}"
        cached = frame["mean_cached_tokens"]
        fig.add_trace(go.Scatter(
            x=frame["mean_prompt_tokens"], y=frame["mean_ttft_ms"], mode="lines+markers",
            name=f"{name}: TTFT", legendgroup=name, line={"color": color},
            customdata=[[int(t), "-" if pd.isna(c) else f"{c:,.0f}"]
                        for t, c in zip(frame["turn"], cached, strict=True)],
            hovertemplate="turn %{customdata[0]}<br>context %{x:,.0f} tokens"
                          "<br>TTFT %{y:.1f} ms<br>cached %{customdata[1]} tokens"
                          "<extra>%{fullData.name}</extra>"))
        if cached.notna().any():
            fig.add_trace(go.Scatter(
                x=frame["mean_prompt_tokens"], y=cached, mode="lines+markers", yaxis="y2",
                name=f"{name}: cached tokens", legendgroup=name,
                line={"color": color, "dash": "dot"}, marker={"symbol": "square-open"},
                customdata=frame["turn"],
                hovertemplate="turn %{customdata}<br>context %{x:,.0f} tokens<br>cached "
                              "%{y:,.0f} tokens<extra>%{fullData.name}</extra>"))
    fig.update_layout(
        xaxis_title="context length (mean prompt tokens of the turn)",
        yaxis_title="mean TTFT (ms)",
        yaxis2={"title": "cached prompt tokens", "overlaying": "y", "side": "right",
                "rangemode": "tozero", "showgrid": False},
        legend={"orientation": "h", "y": -0.25}, margin={"t": 30, "b": 10}, height=420)
    return fig


def trace_timeline(windows: pd.DataFrame, speedup: float) -> go.Figure:
    """A timed trace level over the trace's own time: the arrival rate per window as bars
    (requests per second of the replay), mean TTFT and TPOT as lines on their own axes."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    x = (windows["start_s"] + windows["width_s"] / 2).tolist()
    fig.add_trace(go.Bar(x=x, y=windows["arrival_rate"].tolist(),
                         width=(windows["width_s"] * 0.9).tolist(),
                         name="arrivals (req/s)", marker={"color": "lightgrey"},
                         hovertemplate="trace %{x:.0f} s<br>%{y:.2f} req/s<extra></extra>"),
                  secondary_y=True)
    for column, name, color in (("mean_ttft_ms", "mean TTFT (ms)", PALETTE[0]),
                                ("mean_tpot_ms", "mean TPOT (ms)", PALETTE[1])):
        fig.add_trace(go.Scatter(x=x, y=windows[column].tolist(), mode="lines+markers",
                                 name=name,
                                 line={"color": color},
                                 hovertemplate=f"trace %{{x:.0f}} s<br>{name} %{{y:.1f}}"
                                               "<extra></extra>"), secondary_y=False)
    fig.update_xaxes(title_text=f"trace time (s; replayed at {speedup:g}x)")
    fig.update_yaxes(title_text="ms", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="arrivals per second of the replay", secondary_y=True,
                     rangemode="tozero", showgrid=False)
    fig.update_layout(height=380, margin={"t": 30, "b": 10}, legend={"orientation": "h"})
    return fig


def host_timeline(slices: pd.DataFrame, requests: pd.DataFrame, concurrency: int) -> go.Figure:
    """A level on its own time axis (seconds since its first send): above, each host's disk
    reads per second of each slice as bars and the table's residency as a line; below, each
    request's TTFT where it was sent, with the I/O stall and the disk's busy share per
    slice."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        specs=[[{"secondary_y": True}], [{"secondary_y": True}]])
    for i, ((node, repeat), part) in enumerate(slices.groupby(["node", "repeat"], sort=True)):
        color = PALETTE[i % len(PALETTE)]
        name = f"node {node}" + (f", repeat {repeat}" if slices["repeat"].max() > 0 else "")
        mid = (part["t_s"] + part["width_s"] / 2).tolist()
        fig.add_trace(go.Bar(x=mid, y=part["read_mb_per_s"].tolist(),
                             width=(part["width_s"] * 0.9).tolist(), marker={"color": color},
                             opacity=0.6, name=f"{name}: disk reads (MB/s)",
                             hovertemplate="%{x:.1f} s: %{y:.2f} MB/s<extra></extra>"),
                      row=1, col=1, secondary_y=False)
        end = (part["t_s"] + part["width_s"]).tolist()
        if part["resident_mib"].notna().any():
            fig.add_trace(go.Scatter(x=end, y=part["resident_mib"].tolist(), mode="lines",
                                     line={"color": color}, name=f"{name}: table resident (MiB)",
                                     hovertemplate="%{x:.1f} s: %{y:.1f} MiB<extra></extra>"),
                          row=1, col=1, secondary_y=True)
        for column, label, dash in (("io_stall_share", "I/O stall", "dot"),
                                    ("disk_busy_share", "disk busy", "dash")):
            if part[column].notna().any():
                fig.add_trace(go.Scatter(x=mid, y=part[column].tolist(), mode="lines+markers",
                                         line={"color": color, "dash": dash},
                                         name=f"{name}: {label} (share)",
                                         hovertemplate=f"%{{x:.1f}} s: {label} %{{y:.0%}}"
                                                       "<extra></extra>"),
                              row=2, col=1, secondary_y=True)
    if not requests.empty:
        fig.add_trace(go.Scatter(x=requests["t_s"].tolist(), y=requests["ttft_ms"].tolist(),
                                 mode="markers", marker={"color": "#111111", "size": 5},
                                 name="TTFT of a request sent then (ms)",
                                 hovertemplate="sent %{x:.2f} s: TTFT %{y:.1f} ms"
                                               "<extra></extra>"),
                      row=2, col=1, secondary_y=False)
    fig.update_xaxes(title_text=f"seconds since C={concurrency}'s first request was sent",
                     row=2, col=1)
    fig.update_yaxes(title_text="disk reads (MB/s)", rangemode="tozero", row=1, col=1,
                     secondary_y=False)
    fig.update_yaxes(title_text="resident (MiB)", rangemode="tozero", showgrid=False, row=1,
                     col=1, secondary_y=True)
    fig.update_yaxes(title_text="TTFT (ms)", rangemode="tozero", row=2, col=1,
                     secondary_y=False)
    fig.update_yaxes(title_text="share of the slice", range=[0, 1], showgrid=False, row=2,
                     col=1, secondary_y=True)
    fig.update_layout(height=560, margin={"t": 30, "b": 10}, legend={"orientation": "h"},
                      barmode="overlay")
    return fig
