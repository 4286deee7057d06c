"""The report's charts as Plotly figure objects (plain dicts the page's plotly.js draws): TTFT
and TPS against the level with the targets drawn and the passing side shaded, errors by kind,
a timed trace's windows. Pure: the same runs give the same figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from harness.results.handover.model import RunReport
from harness.results.metrics import level_key
from harness.results.summary import IntervalDict, LevelRow, row_name

Figure = dict[str, Any]
PASS_FILL = "rgba(46, 160, 67, 0.10)"
TARGET_LINE = {"color": "#b42318", "width": 1.5, "dash": "dash"}
# what a run's levels are counted in, by its level key (metrics.level_key)
X_AXES = {"C": ("concurrency C (streams)", "concurrency"), "U": ("users U", "concurrency"),
          "R": ("request rate (req/s)", "rate"), "X": ("trace speedup", "speedup")}


def x_axis(report: RunReport) -> tuple[str, str]:
    """The axis title and level row key a run's charts are drawn over."""
    return X_AXES.get(level_key(report.summary["mode"]) or "C", X_AXES["C"])


def _layout(title: str, x_title: str, y_title: str, log_x: bool) -> dict[str, Any]:
    return {"title": {"text": title}, "height": 380, "margin": {"l": 60, "r": 20, "t": 50,
                                                                "b": 50},
            "xaxis": {"title": {"text": x_title}, "type": "log" if log_x else "linear"},
            "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.25}, "template": None,
            "paper_bgcolor": "white", "plot_bgcolor": "white"}


def metric_figure(reports: Sequence[RunReport], metric: str, title: str, y_title: str,
                  target: float, below: bool, names: Mapping[str, str]) -> Figure:
    """`metric` of each run's levels against its level, with error bars where the level has
    an interval, passing levels as filled markers and failing ones as crosses; the target as
    a dashed line and the side that meets it shaded; each published reference curve dashed.
    `below`: the target is a ceiling (TTFT), else a floor (TPS)."""
    x_title, x_key = x_axis(reports[0])
    ci_key = {"mean_ttft_ms": "ttft_ci", "mean_tps": "tps_ci"}.get(metric)
    data: list[dict[str, Any]] = []
    xs_all: list[float] = []
    for report in reports:
        levels = [lv for lv in report.summary["levels"] if lv.get(metric) is not None]
        xs = [_x(lv, x_key) for lv in levels]
        xs_all += xs
        trace: dict[str, Any] = {
            "type": "scatter", "mode": "lines+markers", "name": names[report.run.run_id],
            "x": xs, "y": [lv.get(metric) for lv in levels],
            "text": [f"{row_name(lv)}: {'passes' if lv['passes'] else 'fails'}"
                     for lv in levels],
            "marker": {"size": 9, "symbol": ["circle" if lv["passes"] else "x"
                                             for lv in levels]}}
        intervals = [_interval(lv, ci_key) for lv in levels]
        if any(intervals):
            trace["error_y"] = {
                "type": "data", "symmetric": False,
                "array": [(iv["high"] - iv["mean"]) if iv and iv["high"] is not None
                          and iv["mean"] is not None else 0 for iv in intervals],
                "arrayminus": [(iv["mean"] - iv["low"]) if iv and iv["low"] is not None
                               and iv["mean"] is not None else 0 for iv in intervals]}
        data.append(trace)
        for run_name, points in report.reference.items():
            shown = [p for p in points if p.get(metric) is not None]
            if shown:
                data.append({"type": "scatter", "mode": "lines+markers",
                             "name": f"published · {run_name}",
                             "x": [p["concurrency"] for p in shown],
                             "y": [p[metric] for p in shown],
                             "line": {"dash": "dot"}, "marker": {"size": 6}})
                xs_all += [float(p["concurrency"] or 0) for p in shown]
    positive = [x for x in xs_all if x > 0]
    log_x = bool(positive) and max(positive) / min(positive) >= 8
    layout = _layout(title, x_title, y_title, log_x)
    if len(set(xs_all)) <= 16:  # each level a tick of its own
        layout["xaxis"]["tickvals"] = sorted(set(xs_all))
    layout["shapes"] = [
        {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": target, "y1": target,
         "line": TARGET_LINE},
        {"type": "rect", "xref": "paper", "x0": 0, "x1": 1, "layer": "below",
         "y0": 0 if below else target, "y1": target if below else _top(data, target),
         "fillcolor": PASS_FILL, "line": {"width": 0}}]
    layout["annotations"] = [{"xref": "paper", "x": 1, "y": target, "xanchor": "right",
                              "yanchor": "bottom", "showarrow": False,
                              "text": f"target {'≤' if below else '≥'} {target:g} "
                                      f"(shaded: passes)"}]
    return {"data": data, "layout": layout}


def _top(data: Sequence[Mapping[str, Any]], target: float) -> float:
    ys = [y for trace in data for y in trace["y"] if y is not None]
    return max([target, *ys]) * 1.15


def _x(level: LevelRow, key: str) -> float:
    value = cast(Mapping[str, Any], level).get(key)
    return float(value) if value is not None else float(level["concurrency"])


def _interval(level: LevelRow, key: str | None) -> IntervalDict | None:
    return cast(Mapping[str, Any], level).get(key) if key else None


def errors_figure(reports: Sequence[RunReport], names: Mapping[str, str]) -> Figure | None:
    """Failed requests per level, stacked by kind (one bar group a run); None where no
    request failed."""
    data = []
    for report in reports:
        for kind, per_level in sorted(report.errors.items()):
            data.append({"type": "bar", "name": f"{names[report.run.run_id]} · {kind}"
                         if len(reports) > 1 else kind,
                         "x": list(per_level), "y": list(per_level.values()),
                         "offsetgroup": report.run.run_id})
    if not data:
        return None
    layout = _layout("Failed requests by kind", "level", "requests", False)
    layout["barmode"] = "stack" if len(reports) == 1 else "group"
    layout["xaxis"]["type"] = "category"
    return {"data": data, "layout": layout}


def trace_windows_figure(report: RunReport) -> Figure | None:
    """A timed trace replay's mean TTFT per window of the trace's time, one line a speedup."""
    levels = report.summary.get("trace_windows") or []
    data = [{"type": "scatter", "mode": "lines+markers", "name": f"X={level['speedup']:g}",
             "x": [w["start_s"] for w in level["windows"]],
             "y": [w["mean_ttft_ms"] for w in level["windows"]]}
            for level in levels if level["windows"]]
    if not data:
        return None
    return {"data": data, "layout": _layout("Mean TTFT over the trace's time",
                                            "trace time (s)", "mean TTFT (ms)", False)}
