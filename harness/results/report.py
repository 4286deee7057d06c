"""Turns stored runs and per-level CSVs into the summary object, tables and capacity output."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from statistics import fmean
from typing import TypeVar, cast

from rich.console import Console
from rich.table import Table

from harness.config import RunConfig, StoredRun
from harness.records import RequestRecord
from harness.results import confidence, users
from harness.results.client_check import ClientCheck
from harness.results.client_check import describe as describe_client
from harness.results.metrics import (
    STATISTIC_FIELDS,
    LevelPoint,
    LevelStats,
    LevelVerdict,
    Targets,
    capacity,
    first_turns,
    level_names,
    point,
    prompt_warning,
    rate_capacity,
    stats_by_level,
)
from harness.results.search import USERS_RESOLUTION, SearchPlan, outcomes, plan
from harness.results.server_metrics import MetricRow, level_figures
from harness.results.store import Store
from harness.results.summary import (
    IntervalDict,
    JudgedDict,
    LevelRow,
    Summary,
    TargetsDict,
    TurnRow,
)
from harness.results.verdicts import USERS_NEED_C

_T = TypeVar("_T")

# Every statistic capacity can judge, TTFT and TPS: each is in --json, whichever is judged.
FIGURE_FIELDS = ("mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms",
                 "mean_tps", "p50_tps", "p10_tps", "p1_tps")
SUMMARY_LEVEL_FIELDS = ("concurrency", "requests", "errors", "short_outputs", *FIGURE_FIELDS,
                        "mean_prompt_tokens", "mean_output_tokens", "throughput_tps",
                        "mean_tpot_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
                        "mean_itl_ms", "p50_itl_ms", "p90_itl_ms", "p99_itl_ms",
                        "mean_tokens_per_chunk", "tokens_per_chunk_estimated",
                        "p50_e2e_ms", "p90_e2e_ms", "p99_e2e_ms")
RATE_LEVEL_FIELDS = ("rate", "p50_send_lag_ms", "p99_send_lag_ms")  # added for rate runs
GOODPUT_FIELDS = ("goodput_share", "goodput_rps")  # added with --slo
# from the target's /metrics, where it exposes speculative decoding (else None)
SPEC_DECODE_FIELDS = ("spec_acceptance_rate", "spec_mean_accepted_length")
ServerFigures = Mapping[tuple[int, float | None], Mapping[str, float]]


def server_levels(rows: Sequence[dict]) -> dict[tuple[int, float | None], dict[str, float]]:
    """Per level (concurrency, rate), the figures of the target's /metrics
    (server_metrics.level_figures), each the mean over the level's passes."""
    passes: dict[tuple[int, float | None], list[dict[str, float]]] = {}
    grouped: dict[tuple[int, float | None, int], list[MetricRow]] = {}
    for r in rows:
        grouped.setdefault((r["concurrency"], r["rate"], r["repeat"]), []).append(
            MetricRow(r["name"], r["labels"], r["kind"], r["stat"], r["value"]))
    for (c, rate, _), level in grouped.items():
        passes.setdefault((c, rate), []).append(level_figures(level))
    out = {}
    for key, figures in passes.items():
        names = {n for f in figures for n in f}
        out[key] = {n: fmean([f[n] for f in figures if n in f]) for n in names}
    return out


class CapacityCSVError(ValueError):
    """A per-level CSV that cannot be scored; one sentence for the user."""


def summarise(
    run: dict, stats: Sequence[LevelStats], records: Sequence[RequestRecord], targets: Targets,
    search: SearchPlan | None = None, paired: tuple[str, int] | None = None,
    server: ServerFigures | None = None,
    client: Mapping[tuple[int, float | None], ClientCheck] | None = None,
    think_means: Mapping[int, float] | None = None,
) -> Summary:
    """The `--json` object of `run` and `summary`; `search`: how `--search` found Max C.
    A rate run has `max_rate` (requests/s) and no Max C or users, which need a concurrency.
    A users run has `users`: its measured max users beside the factor estimate from the Max C
    of `paired` (run id, Max C), the newest closed run of the same setup. `server`: per level,
    the target's own figures (server_levels), of which speculative decoding is shown; `client`:
    per level, the harness's self-check (a client-bound level is named in the warnings);
    `think_means`: a users run's mean think Z per level, as its sweep stored it."""
    levels: list[LevelRow]
    found: Summary
    if run["mode"] == "rate":
        levels, found, warnings = _rate_levels(run, stats, targets)
    else:
        levels, found, warnings = _concurrency_levels(run, stats, targets, search)
        intervals = level_intervals(records)
        found.update(_repeats(levels, records, run["output_tokens"], targets, intervals))
    for row in levels:
        figures = (server or {}).get((row["concurrency"], row.get("rate")), {})
        for name in SPEC_DECODE_FIELDS:
            row[name] = _round(figures.get(name))  # type: ignore[literal-required]
        checked = (client or {}).get((row["concurrency"], row.get("rate")))
        row["loop_lag_p50_ms"] = _round(checked.loop_lag_p50_ms) if checked else None
        row["loop_lag_p99_ms"] = _round(checked.loop_lag_p99_ms) if checked else None
        row["client_cpu_share"] = _round(checked.cpu_share) if checked else None
        row["client_cpu_wait_share"] = _round(checked.cpu_wait_share) if checked else None
        row["unread_bytes_max"] = checked.unread_bytes_max if checked else None
        row["client_bound"] = checked.client_bound if checked else None
        if checked and checked.client_bound:
            warnings.append(describe_client(_row_name(row), checked))
    if run["mode"] == "users":
        found.update(_users(run, levels, records, targets, paired, think_means, intervals))
        warnings += [f"U={row['concurrency']} is not in steady state, left out of Max users: "
                     f"{row['steady_state_note']}" for row in levels if not row["steady_state"]]
    turns = turn_rows(records)
    if StoredRun.from_json(run.get("config")).calibrated:
        sized = stats_by_level(first_turns(records), run["output_tokens"])  # new messages
        warnings += [w for s in sized if (w := prompt_warning(s, run["input_tokens"]))]
    estimated = sum(1 for r in records if r.ok and r.output_tokens_estimated)
    if estimated:
        warnings.append(f"{estimated} request(s) reported no usage: output tokens are chunk "
                        "counts (estimated)")
    short = sum(s.short_outputs for s in stats)
    if short:
        warnings.append(f"{short} request(s) ended before {run['output_tokens']} output tokens")
    summary: Summary = {
        "run_id": run["run_id"], "status": run["status"], "device": run["device"],
        "engine": run["engine"], "model": run["model"],
        "table_placement": run["table_placement"], "label": run["label"],
        "mode": run["mode"], "rounds": run["rounds"],
        "input_tokens": run["input_tokens"], "measured_input_tokens": run["measured_input_tokens"],
        "output_tokens": run["output_tokens"],
        "targets": cast(TargetsDict, asdict(targets)), "statistic": targets.statistic,
        "judged": _judged(targets.statistic), "levels": levels,
    }
    summary.update(found)
    summary["turns"] = turns if len(turns) > 1 else None
    config = StoredRun.from_json(run.get("config")).config
    summary["token_times"] = bool(config and config.token_times)
    summary["warnings"] = warnings
    return summary


def _users(run: dict, levels: list[LevelRow], records: Sequence[RequestRecord],
           targets: Targets, paired: tuple[str, int] | None,
           think_means: Mapping[int, float] | None,
           intervals: tuple[Mapping[int, confidence.Interval], Mapping[int, confidence.Interval]],
           ) -> Summary:
    """Max users (the highest passing user count among the levels in steady state), each
    level's duty cycle, mean think, response-time law and steady-state check, the levels
    whose verdict lies within their noise, beside the published factor estimate; Max C and its
    users do not apply to a users run."""
    config = StoredRun.from_json(run.get("config")).config
    profile = config.profile if config else ""
    duty_target = config.duty_cycle if config else None
    target = users.target_duty(config)
    ttft, tps = intervals  # level_intervals: mean TTFT and TPS per level
    checks = users.level_checks(records, config, targets, tps, ttft)
    for row in levels:
        c = row["concurrency"]
        check = checks.get(c)
        steady = check.steady if check else None
        row["duty_cycle"] = _round(steady.duty_cycle) if steady else None
        row["think_mean_ms"] = _round((think_means or {}).get(
            c, steady.think_mean_ms if steady else None))
        row["response_time_law_error_pct"] = _round(steady.law_error_pct) if steady else None
        row["steady_state"] = bool(steady and steady.flag is None)
        row["steady_state_note"] = steady.flag if steady else "no request was stored"
        row["within_noise"] = bool(check and check.within_noise)
        row["in_flight_mean"] = _round(steady.in_flight_mean) if steady else None
        row["in_flight_sd"] = _round(steady.in_flight_sd) if steady else None
    max_users = max((row["concurrency"] for row in levels
                     if row["steady_state"] and row["passes"]), default=0)
    duty = next((row["duty_cycle"] for row in levels if row["concurrency"] == max_users), None)
    estimate = users.estimate(max_users, duty, paired[1] if paired else None, profile,
                              duty_target, targets)
    return {
        "max_c": None, "chat_users": None, "agentic_users": None, "max_users": max_users,
        "users": {
            "profile": profile or None, "duty_cycle_target": target,
            "think_s": config.think_s if config else None,
            "think_dist": config.think_dist if config else "exponential",
            "max_users": max_users,
            "uncertain_levels": [row["concurrency"] for row in levels if row["within_noise"]],
            "unsteady_levels": [row["concurrency"] for row in levels
                                if not row["steady_state"]],
            "duty_cycle": duty, "factor": estimate.factor,
            "closed_run": paired[0] if paired else None, "max_c": estimate.max_c,
            "estimated_users": estimate.estimated_users,
            "predicted_users": _round(estimate.predicted_users),
            "measured_factor": _round(estimate.measured_factor),
        },
    }


def turn_rows(records: Sequence[RequestRecord]) -> list[TurnRow]:
    """Per turn of the conversations (all levels): the context sent, what the server reported
    cached, and TTFT; one row for a single-turn run."""
    by_turn: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.ok and r.rate is None:
            by_turn.setdefault(r.turn, []).append(r)

    def mean(values: list[float]) -> float | None:
        return _round(sum(values) / len(values)) if values else None

    return [{"turn": turn, "requests": len(rs),
             "mean_prompt_tokens": mean([r.input_tokens for r in rs if r.input_tokens is not None]),
             "mean_cached_tokens": mean([r.cached_tokens for r in rs
                                         if r.cached_tokens is not None]),
             "mean_ttft_ms": mean([r.ttft_ms for r in rs if r.ttft_ms is not None])}
            for turn, rs in sorted(by_turn.items())]


def _level_row(s: LevelStats, verdict: LevelVerdict, fields: Sequence[str],
               targets: Targets) -> LevelRow:
    if targets.slo:
        fields = (*fields, *GOODPUT_FIELDS)
    row = cast(LevelRow, {k: _round(getattr(s, k)) for k in fields})
    row["passes"] = verdict.passes
    row["fails_because"] = verdict.reason or None
    return row


def _concurrency_levels(
    run: dict, stats: Sequence[LevelStats], targets: Targets, search: SearchPlan | None
) -> tuple[list[LevelRow], Summary, list[str]]:
    """Per-level rows, Max C with users, and warnings of a closed or burst run."""
    users_levels = run.get("mode") == "users"
    cap = capacity([point(s, targets.statistic) for s in stats], targets, users_levels)
    verdicts = {v.concurrency: v for v in cap.levels}
    levels = [_level_row(s, verdicts[s.concurrency], SUMMARY_LEVEL_FIELDS, targets)
              for s in stats]
    warnings = list(cap.warnings)
    missing = sorted(set(run["levels"]) - {s.concurrency for s in stats})
    if missing:
        warnings.append(f"levels not measured: {level_names(users_levels)[0]}="
                        f"{','.join(map(str, missing))}")
    found: Summary = {
        "max_c": cap.max_c,
        "max_c_search": ({"how": search.how, "exact": search.exact,
                          "lower_bound": search.lower_bound} if search else None),
        "chat_users": cap.chat_users, "agentic_users": cap.agentic_users,
    }
    return levels, found, warnings


def _interval(iv: confidence.Interval | None) -> IntervalDict | None:
    if iv is None:
        return None
    return {"mean": _round(iv.mean), "low": _round(iv.low), "high": _round(iv.high),
            "method": iv.method, "clusters": iv.clusters, "repeats": iv.repeats, "note": iv.note}


def level_intervals(records: Sequence[RequestRecord]
                    ) -> tuple[dict[int, confidence.Interval], dict[int, confidence.Interval]]:
    """Per concurrency, mean TTFT and mean TPS with their 95% interval over (repeat, round)
    clusters, or the range over repeats when there are too few clusters (results.confidence)."""
    ok = [r for r in records if r.ok and r.rate is None]
    ttft = confidence.intervals_by_level((r.concurrency, r.repeat, r.round, r.ttft_ms)
                                         for r in ok)
    tps = confidence.intervals_by_level((r.concurrency, r.repeat, r.round, r.tps) for r in ok)
    return ttft, tps  # type: ignore[return-value]


def repeat_agreement(records: Sequence[RequestRecord], output_target: int,
                     targets: Targets) -> confidence.Agreement | None:
    """Max C of each repeat on its own, and how many of them agree (None for one repeat)."""
    by_repeat: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.rate is None:
            by_repeat.setdefault(r.repeat, []).append(r)
    if len(by_repeat) < 2:
        return None
    max_cs = [capacity([point(s, targets.statistic)
                        for s in stats_by_level(rs, output_target, targets.slo)],
                       targets).max_c
              for _, rs in sorted(by_repeat.items())]
    return confidence.agreement(max_cs)


def _repeats(levels: list[LevelRow], records: Sequence[RequestRecord], output_target: int,
             targets: Targets,
             intervals: tuple[Mapping[int, confidence.Interval], Mapping[int, confidence.Interval]],
             ) -> Summary:
    """Adds ttft_ci and tps_ci to each level row; the repeats and their Max C agreement."""
    ttft, tps = intervals
    for row in levels:
        row["ttft_ci"] = _interval(ttft.get(row["concurrency"]))
        row["tps_ci"] = _interval(tps.get(row["concurrency"]))
    agree = repeat_agreement(records, output_target, targets)
    repeats = len({r.repeat for r in records if r.rate is None}) or 1
    return {"repeats": repeats,
            "max_c_agreement": ({"max_c": int(agree.max_c), "agree": agree.agree,
                                 "repeats": agree.repeats, "text": agree.text}
                                if agree else None)}


def _rate_levels(
    run: dict, stats: Sequence[LevelStats], targets: Targets
) -> tuple[list[LevelRow], Summary, list[str]]:
    """Per-level rows (with send lag), the sustainable rate, and warnings of a rate run."""
    cap = rate_capacity(stats, targets)
    verdicts = dict(cap.levels)
    rated = [(s.rate, s) for s in stats if s.rate is not None]
    fields = (*RATE_LEVEL_FIELDS, *SUMMARY_LEVEL_FIELDS)
    levels = [_level_row(s, verdicts[rate], fields, targets) for rate, s in rated]
    warnings = list(cap.warnings)
    config = StoredRun.from_json(run.get("config")).config
    planned = config.rates if config else ()
    missing = sorted(set(planned) - {rate for rate, _ in rated})
    if missing:
        warnings.append(f"rates not measured: {','.join(f'{r:g}' for r in missing)} req/s")
    found: Summary = {"max_rate": cap.max_rate, "max_c": None, "max_c_search": None,
                      "chat_users": None, "agentic_users": None, "users_note": USERS_NEED_C}
    return levels, found, warnings


def _judged(statistic: str) -> JudgedDict:
    """The two figures the named statistic judges."""
    ttft, tps = STATISTIC_FIELDS[statistic]
    return {"ttft": ttft, "tps": tps}


def _round(value: _T) -> _T:
    """A float to 3 decimals (what --json shows); anything else as it is."""
    return cast(_T, round(value, 3)) if isinstance(value, float) else value


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def print_summary(summary: Summary, console: Console) -> None:
    title = (f"run {summary['run_id']} ({summary['status']}): {summary['model']} on "
             f"{summary['device'] or 'unlabelled device'}, engine {summary['engine'] or '-'}, "
             f"table {summary['table_placement'] or '-'}")
    table = Table(title=title, title_justify="left")
    rate_run = summary["mode"] == "rate"
    users_run = summary["mode"] == "users"
    first = (("req/s", "lag p50", "lag p99") if rate_run
             else ("users", "duty") if users_run else ("C",))
    for name in (*first, "req", "err", "short", "TTFT mean", "p50", "p90", "p99", "TPS mean",
                 "TPS p10", "in tok", "out tok", "tok/s all", "pass"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        load = ((f"{lv['rate']:g}", _fmt(lv["p50_send_lag_ms"], 2),
                 _fmt(lv["p99_send_lag_ms"], 2)) if rate_run
                else (str(lv["concurrency"]), _fmt(lv["duty_cycle"], 2)) if users_run
                else (str(lv["concurrency"]),))
        table.add_row(
            *load, str(lv["requests"]), str(lv["errors"]),
            str(lv["short_outputs"]), _fmt(lv["mean_ttft_ms"]), _fmt(lv["p50_ttft_ms"]),
            _fmt(lv["p90_ttft_ms"]), _fmt(lv["p99_ttft_ms"]), _fmt(lv["mean_tps"]),
            _fmt(lv["p10_tps"]), _fmt(lv["mean_prompt_tokens"]), _fmt(lv["mean_output_tokens"]),
            _fmt(lv["throughput_tps"]),
            "[green]yes[/]" if lv["passes"] else "[red]no[/]",
        )
    console.print(table, width=max(console.width, 132))  # a narrow terminal must not hide figures
    _print_token_timing(summary, console)
    t = summary["targets"]
    if t["slo"]:
        _print_goodput(summary, console)
    if rate_run:
        console.print(
            f"Sustainable rate = [bold]{summary['max_rate']:g}[/] requests/s ({t['statistic']} "
            f"TPS >= {t['tps_min']:g} tok/s, TTFT <= {t['ttft_max_ms']:g} ms, no errors"
            f"{_goodput_rule(t)}); "
            f"{summary['users_note']}", highlight=False)
    elif users_run:
        _print_users(summary, console)
    else:
        _print_max_c(summary, console)
    if turns := summary.get("turns"):
        _print_turns(turns, console)
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)


def _print_token_timing(summary: Summary, console: Console) -> None:
    """Per level: TPOT, token-weighted ITL, tokens per chunk (~: estimated, the server sent no
    per-chunk usage) and end-to-end latency."""
    levels = [lv for lv in summary["levels"] if lv.get("mean_tpot_ms") is not None]
    if not levels:
        return
    table = Table(title="token timing (ms; ITL token-weighted)", title_justify="left")
    spec = any(lv.get(f) is not None for lv in levels for f in SPEC_DECODE_FIELDS)
    for name in ("level", "TPOT mean", "p50", "p99", "ITL mean", "p50", "p90", "p99",
                 "tok/chunk", *(("accepted", "tok/step") if spec else ()), "E2E p50", "p90",
                 "p99"):
        table.add_column(name, justify="right")
    for lv in levels:
        per_chunk = lv.get("mean_tokens_per_chunk")
        chunk_text = ("-" if per_chunk is None else
                      f"{'~' if lv.get('tokens_per_chunk_estimated') else ''}{per_chunk:.2f}")
        table.add_row(
            _row_name(lv), _fmt(lv["mean_tpot_ms"], 2), _fmt(lv["p50_tpot_ms"], 2),
            _fmt(lv["p99_tpot_ms"], 2), _fmt(lv.get("mean_itl_ms"), 2),
            _fmt(lv.get("p50_itl_ms"), 2), _fmt(lv.get("p90_itl_ms"), 2),
            _fmt(lv.get("p99_itl_ms"), 2), chunk_text,
            *((_share(lv.get("spec_acceptance_rate")),
               _fmt(lv.get("spec_mean_accepted_length"), 2)) if spec else ()),
            _fmt(lv["p50_e2e_ms"], 0),
            _fmt(lv["p90_e2e_ms"], 0), _fmt(lv["p99_e2e_ms"], 0))
    console.print(table, width=max(console.width, 132))
    if summary.get("token_times"):
        console.print("--token-times: every chunk's arrival and tokens are stored in the "
                      "chunk_times table (the explorer draws each level's request timeline)",
                      highlight=False)
    if any(lv.get("tokens_per_chunk_estimated") for lv in levels):
        console.print("~ tokens per chunk estimated (output tokens / chunks): the server "
                      "streamed no per-chunk usage", highlight=False)


def _print_users(summary: Summary, console: Console) -> None:
    t, u = summary["targets"], summary["users"]
    _print_steady_state(summary, console)
    who = f"{u['profile']} users" if u["profile"] else "users"
    duty = f", measured duty cycle {u['duty_cycle']:.2f}" if u["duty_cycle"] is not None else ""
    console.print(
        f"Max users = [bold]{u['max_users']}[/] {who} ({t['statistic']} TPS >= "
        f"{t['tps_min']:g} tok/s, TTFT <= {t['ttft_max_ms']:g} ms, no errors{_goodput_rule(t)}"
        f"{duty}; {_noise_note(summary)})",
        highlight=False)
    if u["max_c"] is None:
        console.print("estimate: no closed run of the same setup (device, engine, model, "
                      "placement, tokens) in this file to take Max C from; run one with "
                      "--mode closed to set the factor estimate beside this", highlight=False)
    else:
        estimate = (f"Max C {u['max_c']} x {u['factor']:g} = [bold]{u['estimated_users']}[/] "
                    if u["estimated_users"] is not None else f"Max C {u['max_c']}")
        predicted = (f"; Max C / measured duty cycle = {u['predicted_users']:.1f}"
                     if u["predicted_users"] is not None else "")
        factor = (f"; measured {u['measured_factor']:.2f} users per Max C"
                  if u["measured_factor"] is not None else "")
        console.print(f"estimate: {estimate} (run {u['closed_run']}){predicted}{factor}",
                      highlight=False)
    if search := summary.get("max_c_search"):
        console.print(f"Max users found by --search: {search['how']}", highlight=False)


def _noise_note(summary: Summary) -> str:
    """Which levels' verdicts their own noise could turn, or why no interval says so."""
    uncertain = summary["users"]["uncertain_levels"]
    if uncertain:
        return f"levels within noise of the targets: {', '.join(map(str, uncertain))}"
    if any((ci := lv.get("tps_ci")) and (ci["method"] == "bootstrap" or ci["repeats"] > 1)
           for lv in summary["levels"]):
        return "no level within noise of the targets"
    return "no interval: one pass with too few rounds, --repeat 3 gives one"


def _print_steady_state(summary: Summary, console: Console) -> None:
    """Per users level: duty cycle, mean think Z, the response-time law's error, the check,
    the requests in flight at the server (mean +- sd over time: how bursty the users were),
    and mean TPS with its interval (or range over repeats)."""
    table = Table(title="users levels: steady state and noise", title_justify="left")
    for name in ("users", "duty", "think Z ms", "law err %", "steady", "in flight",
                 "TPS mean", "TPS interval", "pass"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        ci = lv.get("tps_ci")
        spread = (f"{_fmt(ci['low'])}-{_fmt(ci['high'])}"
                  f"{'' if ci['method'] == 'bootstrap' else ' (range)'}"
                  if ci and (ci["method"] == "bootstrap" or ci["repeats"] > 1) else "-")
        table.add_row(str(lv["concurrency"]), _fmt(lv["duty_cycle"], 2),
                      _fmt(lv["think_mean_ms"]), _fmt(lv["response_time_law_error_pct"]),
                      "yes" if lv["steady_state"] else "[red]no[/]",
                      "-" if lv["in_flight_mean"] is None
                      else f"{lv['in_flight_mean']:.1f} +- {lv['in_flight_sd']:.1f}",
                      _fmt(lv["mean_tps"]),
                      spread, ("[yellow]?[/] " if lv["within_noise"] else "")
                      + ("[green]yes[/]" if lv["passes"] else "[red]no[/]"))
    console.print(table, width=max(console.width, 100))


def _print_turns(turns: list[TurnRow], console: Console) -> None:
    table = Table(title="per turn: the context grows, a prefix cache can reuse it",
                  title_justify="left")
    for name in ("turn", "req", "prompt tok", "cached tok", "TTFT mean"):
        table.add_column(name, justify="right")
    for row in turns:
        table.add_row(str(row["turn"]), str(row["requests"]), _fmt(row["mean_prompt_tokens"]),
                      _fmt(row["mean_cached_tokens"]), _fmt(row["mean_ttft_ms"]))
    console.print(table)


def _print_max_c(summary: Summary, console: Console) -> None:
    t = summary["targets"]
    console.print(
        f"Max C = [bold]{summary['max_c']}[/] ({t['statistic']} TPS >= {t['tps_min']:g} tok/s, "
        f"TTFT <= {t['ttft_max_ms']:g} ms, no errors{_goodput_rule(t)})  ->  chat users "
        f"[bold]{summary['chat_users']}[/] (x{t['chat_factor']:g}), agentic users "
        f"[bold]{summary['agentic_users']}[/] (x{t['agentic_factor']:g})",
        highlight=False,
    )
    if search := summary.get("max_c_search"):
        console.print(f"Max C found by --search: {search['how']}", highlight=False)
    agree = summary.get("max_c_agreement")
    if agree:
        console.print(f"Max C {summary['max_c']} ({agree['text']} repeats agree"
                      + ("" if agree["max_c"] == summary["max_c"]
                         else f"; the repeats' most common Max C is {agree['max_c']}") + ")",
                      highlight=False)
    _print_intervals(summary, console)


def _ci_text(ci: IntervalDict | None, unit: str) -> str:
    if ci is None:
        return "-"
    kind = "95% CI" if ci["method"] == "bootstrap" else "range"
    return f"{ci['mean']:.1f} {unit} ({kind} {ci['low']:.1f}-{ci['high']:.1f})"


def _print_intervals(summary: Summary, console: Console) -> None:
    """Per level, mean TTFT and TPS with their interval, when the run has repeats or enough
    rounds for a bootstrap; a range is said to be one."""
    rows = [(lv["concurrency"], lv.get("ttft_ci"), lv.get("tps_ci")) for lv in summary["levels"]
            if lv.get("ttft_ci") or lv.get("tps_ci")]
    if not rows or (summary.get("repeats", 1) < 2
                    and all(ttft is None or ttft["method"] != "bootstrap"
                            for _, ttft, _ in rows)):
        return
    for concurrency, ttft, tps in rows:
        console.print(f"C={concurrency}: TTFT {_ci_text(ttft, 'ms')}, "
                      f"TPS {_ci_text(tps, 'tok/s')}", highlight=False)
    notes = {ci["note"] for _, ttft, tps in rows for ci in (ttft, tps) if ci and ci["note"]}
    for note in sorted(notes):
        console.print(f"  ({note})", highlight=False)


# -- the bundled server's table, from its /stats -----------------------------------------------

SERVER_TABLE_KEYS: dict[str, type | tuple[type, ...]] = {
                     "table_bytes": (int, float), "placement": str, "io_mode": str,
                     "table_budget_bytes": (int, float), "cache_ratio": (int, float),
                     "cache_state": str, "decode": str}


def server_table(stats: dict | None) -> dict:
    """What /stats says about the table and its start state (stored with the run); keys a
    server does not report, reports as null or in another type are left out."""
    stats = stats or {}
    return {k: stats[k] for k, kind in SERVER_TABLE_KEYS.items() if isinstance(stats.get(k), kind)}


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def describe_server_table(table: dict) -> str:
    """One line, e.g. 'table: 2.0 GiB on nvme (mmap), page-cache budget 343.5 MiB (cache ratio
    0.168), cold start, decode replay', naming only what the server reported."""
    where = []
    if "table_bytes" in table:
        where.append(_size(table["table_bytes"]))
    if "placement" in table:
        where.append(f"on {table['placement']}")
    if "io_mode" in table:
        where.append(f"({table['io_mode']})")
    parts = [" ".join(where)] if where else []
    ratio = f"cache ratio {table['cache_ratio']:.3g}" if "cache_ratio" in table else ""
    if "table_budget_bytes" in table:
        kind = "row-cache" if table.get("io_mode") == "direct" else "page-cache"
        parts.append(f"{kind} budget {_size(table['table_budget_bytes'])}"
                     + (f" ({ratio})" if ratio else ""))
    elif ratio:
        parts.append(ratio)
    if "cache_state" in table:
        parts.append(f"{table['cache_state']} start")
    if "decode" in table:
        parts.append(f"decode {table['decode']}")
    return "table: " + ", ".join(parts)


# -- capacity --csv ----------------------------------------------------------------------------

def read_level_csv(path: Path, statistic: str = "mean") -> dict[str, list[dict]]:
    """Per-level figures measured anywhere: per run, rows of concurrency, errors and every
    FIGURE_FIELDS column the file has; an empty cell is a figure that was not published. The
    columns the chosen statistic judges are required."""
    required = ("run", "concurrency", *STATISTIC_FIELDS[statistic])
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in required if c not in (reader.fieldnames or [])]
            if missing:
                raise CapacityCSVError(
                    f"{path} lacks column(s) {', '.join(missing)}; --statistic {statistic} "
                    f"needs: {', '.join(required)}"
                )
            runs: dict[str, list[dict]] = {}
            for line, row in enumerate(reader, start=2):
                runs.setdefault(row["run"], []).append(_level(row, path, line))
    except OSError as exc:
        raise CapacityCSVError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise CapacityCSVError(f"{path} is not a UTF-8 text CSV") from None
    if not runs:
        raise CapacityCSVError(f"{path} has no rows")
    return runs


def _level(row: dict, path: Path, line: int) -> dict:
    def number(name: str, kind: type = float) -> float | int | None:
        text = (row.get(name) or "").strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise CapacityCSVError(f"{path} line {line}: {name} {text!r} is not a number") from None
        if not 0 <= value < math.inf:  # NaN fails too
            raise CapacityCSVError(f"{path} line {line}: {name} {text!r} is not a finite "
                                   "number >= 0")
        return int(value) if kind is int else value

    concurrency = number("concurrency", int)
    if concurrency is None or concurrency < 1:
        raise CapacityCSVError(f"{path} line {line}: concurrency must be a positive integer")
    errors = number("errors", int) if "errors" in row else 0
    return {"concurrency": concurrency, "errors": errors,
            **{name: number(name) for name in FIGURE_FIELDS}}


def capacity_object(runs: dict[str, list[dict]], targets: Targets) -> dict:
    """The `capacity --json` object: per run, Max C and users, and per level every figure
    with its verdict under the named statistic."""
    ttft, tps = STATISTIC_FIELDS[targets.statistic]
    out = {}
    for name, rows in runs.items():
        rows = sorted(rows, key=lambda r: r["concurrency"])  # the order capacity judges in
        cap = capacity([LevelPoint(r["concurrency"], r[ttft], r[tps], r["errors"]) for r in rows],
                       targets)
        out[name] = {
            "max_c": cap.max_c, "chat_users": cap.chat_users, "agentic_users": cap.agentic_users,
            "statistic": targets.statistic, "judged": _judged(targets.statistic),
            "levels": [{**r, "passes": v.passes, "fails_because": v.reason or None}
                       for r, v in zip(rows, cap.levels, strict=True)],
            "warnings": cap.warnings,
        }
    return out


def print_peer_view(view: dict, run_id: str, console: Console) -> None:
    """`summary --as TOOL`: the tool's figures per level, with how each is computed."""
    table = Table(title=f"run {run_id} as {view['tool']} defines its figures (from the "
                  "stored rows)", title_justify="left")
    table.add_column("figure")
    table.add_column("unit")
    for lv in view["levels"]:
        table.add_column(f"R={lv['rate']:g}" if lv["rate"] is not None
                         else f"C={lv['concurrency']}", justify="right")
    table.add_column("how")
    for name, definition in view["definitions"].items():
        table.add_row(name, view["units"][name],
                      *(_fmt(lv["figures"][name], 2) for lv in view["levels"]), definition)
    console.print(table, width=max(console.width, 132))
    for name, why in view["missing"].items():
        console.print(f"{name}: - {why}")


def print_capacity(result: dict, console: Console) -> None:
    table = Table(title="capacity", title_justify="left")
    for name in ("run", "levels passing", "Max C", "chat users", "agentic users"):
        if name == "run":
            table.add_column(name, overflow="fold", min_width=24)
        else:
            table.add_column(name, justify="right")
    for name, r in result.items():
        passing = ",".join(str(lv["concurrency"]) for lv in r["levels"] if lv["passes"]) or "-"
        table.add_row(name, passing, str(r["max_c"]), str(r["chat_users"]),
                      str(r["agentic_users"]))
    console.print(table, width=max(console.width, 132))  # a narrow terminal must not hide figures
    for name, r in result.items():
        for warning in r["warnings"]:
            console.print(f"[yellow]warning[/] {name}: {warning}", highlight=False)


def _print_goodput(summary: Summary, console: Console) -> None:
    """One line: the SLO, then each level's share meeting it and its good requests/s."""
    t = summary["targets"]
    slo = ", ".join(f"{key[:-3].upper()} <= {limit:g} ms" for key, limit in (t["slo"] or {}).items()
                    if limit is not None)
    needed = f", a level needs {t['min_goodput']:.0%}" if t["min_goodput"] else ""
    parts = [f"{_row_name(lv)} {_share(lv.get('goodput_share'))} "
             f"({_fmt(lv.get('goodput_rps'))} req/s)" for lv in summary["levels"]]
    console.print(f"goodput ({slo}{needed}): {'; '.join(parts)}", highlight=False)


def _goodput_rule(t: TargetsDict) -> str:
    """The rule line's goodput clause, when a level must meet one."""
    return f", goodput >= {t['min_goodput']:.0%}" if t["min_goodput"] else ""


def _row_name(row: LevelRow) -> str:
    rate = row.get("rate")
    return f"R={rate:g}" if rate is not None else f"C={row['concurrency']}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def search_plan(store: Store, run_id: str, config: RunConfig, targets: Targets) -> SearchPlan:
    """Where the Max C search of a run stands, from its stored levels and probes."""
    stats = stats_by_level(store.requests(run_id), config.output_tokens, targets.slo)
    verdicts = outcomes([point(s, targets.statistic) for s in stats], targets)
    probed = store.probes(run_id)
    swept = {c: ok for c, ok in verdicts.items() if c not in probed}
    probes = [(c, verdicts[c]) for c in probed if c in verdicts]
    resolution = USERS_RESOLUTION if config.mode == "users" else 0.0
    return plan(swept, probes, config.max_concurrency, resolution)
