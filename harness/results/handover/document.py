"""The report's HTML: one page for one run, or a comparison of several, with the chart library
inline once and every figure's data in one script block. Pure: the same reports, library and
timestamp give the same bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from harness import __version__
from harness.results.handover import charts, measured
from harness.results.handover.markup import Markup, join, number, script_json, table, tag
from harness.results.handover.model import RunReport
from harness.results.metrics import LEVEL_FIGURES, level_key
from harness.results.render import LEVEL_TABLE, TIMING_TABLE, first_token_name
from harness.results.summary import IntervalDict, LevelRow, Summary, row_name

GENERATED_ID = "generated"  # the element holding the time the report was written
FINISHED = "complete"
HOST_COLUMNS = (("tree_read_bytes_per_output_token", "server reads B/out tok"),
                ("major_faults_per_output_token", "major faults/out tok"),
                ("table_resident_bytes_end", "table resident B (end)"),
                ("peak_rss_file_bytes", "peak RSS file B"),
                ("peak_pinned_bytes", "peak pinned B"),
                ("io_stall_share", "I/O stall share"), ("disk_busy_share", "disk busy share"))
USERS_COLUMNS = (("duty_cycle", "duty cycle"), ("think_mean_ms", "think mean (ms)"),
                 ("in_flight_mean", "in flight mean"),
                 ("response_time_law_error_pct", "law error %"),
                 ("steady_state", "steady"), ("steady_state_note", "why not steady"))
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1180px;
padding:0 20px 40px;color:#1f2328}
h1{font-size:24px;margin:18px 0 4px}h2{font-size:19px;margin-top:30px;border-bottom:1px solid
#d0d7de;padding-bottom:4px}h3{font-size:16px}
.status{background:#fff4e5;border:1px solid #f0b35a;padding:8px 12px;margin:12px 0 0;
font-weight:600}
.verdict{font-size:20px;font-weight:600;margin:8px 0}.muted{color:#59636e}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}caption{text-align:left;
color:#59636e;padding:4px 0}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f6f8fa}td.num{text-align:right;
font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;padding:8px 12px;overflow-x:auto;white-space:pre-wrap;
word-break:break-all}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(480px,1fr));gap:12px}
.chart{min-height:380px;border:1px solid #d0d7de}.warn{color:#9a6700}
"""


@dataclass(frozen=True)
class Built:
    """The page, and the figures its charts draw (in page order: --png writes each)."""

    html: str
    figures: list[dict[str, Any]]
    run_ids: list[str]
    unfinished: list[tuple[str, str]]  # (run id, status) of the runs that did not complete


def build(reports: Sequence[RunReport], plotly_js: str, generated: str,
          placement: str | None = None) -> Built:
    """The whole page. `plotly_js`: the chart library's source, inlined once; `generated`: when
    the report was written (shown in element #generated); `placement`: the placement verdict
    paragraph of a comparison whose runs differ only in placement."""
    names = _names(reports)
    figures: list[dict[str, Any]] = []

    def chart(figure: dict[str, Any] | None) -> Markup:
        if figure is None:
            return Markup("")
        figures.append(figure)
        return tag("div", "", class_="chart", id=f"chart-{len(figures) - 1}")

    if len(reports) == 1:
        title = _run_title(reports[0])
        body = _run_body(reports[0], names, chart, level=2)
    else:
        title = f"Comparison of {len(reports)} runs"
        body = _comparison(reports, names, chart, placement)
    status = join(_status_line(r) for r in reports if r.summary["status"] != FINISHED)
    head = join([Markup('<meta charset="utf-8">'),
                 Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
                 tag("title", title), tag("style", Markup(STYLE))])
    footer = tag("p", "Written by engram-bench ", __version__, " at ",
                 tag("span", generated, id=GENERATED_ID),
                 ". Every figure is in this file; it makes no network request.", class_="muted")
    script = Markup(
        f"<script>{plotly_js}</script>\n<script>const FIGURES={script_json(figures)};"
        "FIGURES.forEach(function(f,i){Plotly.newPlot('chart-'+i,f.data,f.layout,"
        "{displaylogo:false,responsive:true});});</script>")
    page = tag("html", tag("head", head),
               tag("body", status, tag("h1", title), body, footer, script), lang="en")
    return Built("<!DOCTYPE html>\n" + page + "\n", figures,
                 [r.run.run_id for r in reports],
                 [(r.run.run_id, r.summary["status"]) for r in reports
                  if r.summary["status"] != FINISHED])


def _names(reports: Sequence[RunReport]) -> dict[str, str]:
    """Each run's name in legends: its label where it has one, else its id."""
    return {r.run.run_id: (f"{r.run.run_id} · {r.summary['label']}" if r.summary.get("label")
                           else r.run.run_id) for r in reports}


def _run_title(report: RunReport) -> str:
    s = report.summary
    return (f"Capacity report: {s['model'] or 'unknown model'} on "
            f"{s['device'] or 'an unlabelled device'}")


def _status_line(report: RunReport) -> Markup:
    """The first line of a report over a run that did not finish: what it is and what was
    stored."""
    s, run = report.summary, report.run
    why = f" ({run.error})" if run.error else ""
    return tag("p", f"Run {s['run_id']} is {s['status']}{why}, not complete: this report "
                    f"shows the {len(s['levels'])} level(s) it stored.", class_="status")


def _run_body(report: RunReport, names: Mapping[str, str], chart: Any, level: int) -> Markup:
    s = report.summary
    h = f"h{level}"
    parts: list[object] = [tag("p", f"Run {s['run_id']}",
                               f" · {s['label']}" if s.get("label") else "", class_="muted"),
                           tag(h, "Verdict"), _verdict(s)]
    key = level_key(s["mode"])
    x_title, _ = charts.x_axis(report)
    if chart is not None:
        parts += [tag(h, "Charts"), tag("div", join([
            *(chart(figure) for figure in _judged_figures([report], names)),
            chart(charts.errors_figure([report], names)),
            chart(charts.trace_windows_figure(report))]), class_="charts")]
        if not report.errors:
            parts.append(tag("p", "No request failed.", class_="muted"))
        if report.reference:
            parts.append(tag("p", "Dotted: the published figures of ",
                             ", ".join(report.reference), " (results/reference/), facts, not "
                             "measured here.", class_="muted"))
    parts += [tag(h, "What was measured"), _measured(report),
              tag(h, "Levels"), _levels_table(s, x_title)]
    if key == "U":
        parts.append(_columns_table(s, USERS_COLUMNS, "A users run's levels"))
    parts.append(_columns_table(s, tuple((f, _header(f)) for f in TIMING_TABLE),
                                "Token timing (ms; ITL token-weighted)"))
    if any(lv.get("host") for lv in s["levels"]):
        parts.append(_host_table(s))
    if report.counters:
        parts.append(_counters_table(report))
    if s["warnings"]:
        parts += [tag(h, "Warnings"),
                  tag("ul", join(tag("li", w, class_="warn") for w in s["warnings"]))]
    return join(parts)


def _comparison(reports: Sequence[RunReport], names: Mapping[str, str], chart: Any,
                placement: str | None) -> Markup:
    first = reports[0].summary
    t = first["targets"]
    rows = [(names[r.run.run_id], r.summary["status"], r.summary["model"], r.summary["device"],
             r.summary["engine"], r.summary["table_placement"], _verdict_text(r.summary))
            for r in reports]
    parts: list[object] = [
        tag("h2", "Runs"),
        table(("run", "status", "model", "device", "engine", "placement", "verdict"), rows),
        tag("p", f"Judged by {t['statistic']} TPS >= {t['tps_min']:g} tok/s, "
                 f"{first_token_name(t)} <= {t['ttft_max_ms']:g} ms, no errors.",
            class_="muted")]
    if placement:
        parts += [tag("h2", "Placement verdict"), tag("p", placement)]
    parts += [tag("h2", "Charts"), tag("div", join([
        *(chart(figure) for figure in _judged_figures(reports, names)),
        chart(charts.errors_figure(reports, names))]), class_="charts")]
    for r in reports:
        parts += [tag("h2", f"{names[r.run.run_id]}: {_run_title(r)}"),
                  _run_body(r, names, None, level=3)]
    return join(parts)


def _judged_figures(reports: Sequence[RunReport], names: Mapping[str, str]) -> list[Any]:
    """The two figures the targets judged, at the statistic and first token they judged
    (the first run's, as the comparison's rule line says)."""
    s = reports[0].summary
    t, judged = s["targets"], s["judged"]
    first_token = first_token_name(t)
    return [charts.metric_figure(reports, judged["ttft"], f"{s['statistic']} {first_token}",
                                 f"{first_token} (ms)", t["ttft_max_ms"], True, names),
            charts.metric_figure(reports, judged["tps"], f"{s['statistic']} TPS per request",
                                 "TPS (tok/s)", t["tps_min"], False, names)]


def _verdict_text(s: Summary) -> str:
    key = level_key(s["mode"])
    if key == "R":
        return f"sustainable rate {s.get('max_rate') or 0:g} req/s"
    if key == "X":
        return f"sustains {s.get('max_speedup') or 0:g}x the trace's rate"
    if key == "U":
        return f"Max users {s.get('max_users')} (measured)"
    return (f"Max C {s['max_c']}: {s['chat_users']} chat / {s['agentic_users']} agentic users")


def _verdict(s: Summary) -> Markup:
    """The verdict line, the targets and statistic it holds under, and how far it can be
    trusted (the repeats' agreement, the search, a starved server, a users run's estimate)."""
    t = s["targets"]
    lines: list[object] = [tag("p", _verdict_text(s), class_="verdict")]
    rule = (f"Under {t['statistic']} TPS per request >= {t['tps_min']:g} tok/s and "
            f"{t['statistic']} {first_token_name(t)} <= {t['ttft_max_ms']:g} ms with no failed "
            "request")
    if level_key(s["mode"]) in ("C", ""):
        rule += (f"; chat users = Max C x {t['chat_factor']:g}, agentic users = Max C x "
                 f"{t['agentic_factor']:g}")
    lines.append(tag("p", rule + "."))
    if agree := s.get("max_c_agreement"):
        lines.append(tag("p", f"Repeats: {agree['text']} agree on Max C "
                              f"(most common: {agree['max_c']})."))
    if search := s.get("max_c_search"):
        lines.append(tag("p", f"Found by --search: {search['how']}."))
    if starved := s.get("max_c_starved"):
        lines.append(tag("p", f"Max C may be this machine's, not the server's: {starved}",
                         class_="warn"))
    if users := s.get("users"):
        lines.append(tag("p", f"Measured max users {users['max_users']}"
                              f" at duty cycle {number(users['duty_cycle'], 2)}; the factor "
                              f"estimate from closed run {users['closed_run'] or '-'} "
                              f"(Max C {number(users['max_c'])}) is "
                              f"{number(users['estimated_users'])} users."))
    if note := s.get("users_note"):
        lines.append(tag("p", note, class_="muted"))
    return join(lines)


def _measured(report: RunReport) -> Markup:
    s, run = report.summary, report.run
    finished = f" to {run.finished_at:%Y-%m-%d %H:%M:%S}" if run.finished_at else ""
    tokens = f"{s['input_tokens']} in / {s['output_tokens']} out tokens a request"
    rows: list[tuple[str, object]] = [
        ("target", measured.public_url(run.target_url) or "-"),
        ("model", s["model"] or "-"), ("engine", s["engine"] or "-"),
        ("device profile", s["device"] or "-"), ("table placement", s["table_placement"] or "-"),
        ("workload", f"{s['mode']}, levels {_levels_named(s)}, {s['rounds']} rounds, {tokens}"),
        ("machine (harness)", measured.machine(run) or "-"),
        ("date (UTC)", f"{run.started_at:%Y-%m-%d %H:%M:%S}{finished}"),
        ("harness version", run.version or "-")]
    rows += [(f"server: {k}", v) for k, v in measured.server_settings(run).items()]
    command = measured.reproduce(run, measured.targets_of(s["targets"]))
    return join([table((), rows, class_="facts"),
                 tag("p", "To measure it again:") if command else "",
                 tag("pre", command) if command else ""])


def _levels_named(s: Summary) -> str:
    return ", ".join(row_name(lv) for lv in s["levels"]) or "none stored"


def _header(name: str) -> str:
    fig = LEVEL_FIGURES[name]
    return fig.title


def _ci(ci: IntervalDict | None) -> str:
    if not ci or ci["low"] is None or ci["high"] is None:
        return "-"
    kind = "95% CI" if ci["method"] == "bootstrap" else "range"
    return f"{ci['low']:.1f}-{ci['high']:.1f} ({kind})"


def _levels_table(s: Summary, x_title: str) -> Markup:
    intervals = any(lv.get("ttft_ci") or lv.get("tps_ci") for lv in s["levels"])
    headers = ["level", *(_header(f) for f in LEVEL_TABLE)]
    if intervals:
        headers += ["mean TTFT interval", "mean TPS interval"]
    headers += ["passes", "fails because"]
    rows = []
    for lv in s["levels"]:
        row: list[object] = [row_name(lv), *(lv.get(f) for f in LEVEL_TABLE)]
        if intervals:
            row += [_ci(lv.get("ttft_ci")), _ci(lv.get("tps_ci"))]
        row += ["yes" if lv["passes"] else "no", lv.get("fails_because") or ""]
        rows.append(row)
    return table(headers, rows, caption=f"Per level ({x_title})")


def _columns_table(s: Summary, columns: Sequence[tuple[str, str]], caption: str) -> Markup:
    rows = [(row_name(lv), *(_cell(lv, k) for k, _ in columns)) for lv in s["levels"]]
    return table(("level", *(h for _, h in columns)), rows, caption=caption)


def _cell(level: LevelRow, key: str) -> object:
    value = cast(Mapping[str, Any], level).get(key)
    return round(value, 2) if isinstance(value, float) else value


def _host_table(s: Summary) -> Markup:
    """The serving hosts' figures per level, from their kernels' counters."""
    rows = []
    for lv in s["levels"]:
        host: Mapping[str, Any] = lv.get("host") or {}
        rows.append((row_name(lv), host.get("source"),
                     *(host.get(k) for k, _ in HOST_COLUMNS), host.get("missing") or ""))
    return table(("level", "source", *(h for _, h in HOST_COLUMNS), "missing"), rows,
                 caption="The serving hosts per level (their kernels' counters)")


def _counters_table(report: RunReport) -> Markup:
    """The server's /stats counters' growth over each level pass: the counters that grew."""
    names = sorted({k for _, grown in report.counters for k, v in grown.items() if v})
    rows = [(level, *(grown.get(k) for k in names)) for level, grown in report.counters]
    return table(("level", *names), rows,
                 caption="The server's /stats counters: growth over each level")
