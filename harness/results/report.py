"""Builds a run's summary (the `--json` object) from its stored rows; `render` prints it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from statistics import fmean
from typing import TypeVar, cast

from common.readable import size
from harness.config import RunConfig, StoredRun
from harness.records import LoadHost, RequestRecord
from harness.results import cold_start, confidence, short_levels, users
from harness.results.client_check import ClientCheck
from harness.results.client_check import describe as describe_client
from harness.results.host_figures import levels_host
from harness.results.host_level import HostLevel
from harness.results.metrics import (
    LevelStats,
    LevelVerdict,
    Targets,
    capacity,
    figure_names,
    first_turns,
    judge,
    level_key,
    level_names,
    point,
    prompt_warning,
    rate_capacity,
    stats_by_level,
)
from harness.results.run_row import RunRow
from harness.results.search import USERS_RESOLUTION, SearchPlan, outcomes, plan, plan_speedup
from harness.results.server_cpu import ServerCpu, starved_because
from harness.results.server_cpu import describe as describe_starved
from harness.results.server_metrics import MetricRow, level_figures
from harness.results.store import Store
from harness.results.summary import (
    HostDict,
    IntervalDict,
    LevelRow,
    LoadHostDict,
    Summary,
    TargetsDict,
    TraceWindowDict,
    TurnRow,
    judged,
    row_name,
)
from harness.results.trace_windows import trace_windows
from harness.results.verdicts import TRACE_USERS_NEED_C, USERS_NEED_C

_T = TypeVar("_T")

# a level row's LevelStats figures, in field order (harness.results.figure): rate levels' own
# lead a rate run's rows, the goodput figures follow with --slo
SUMMARY_LEVEL_FIELDS = figure_names("level", "summary")
RATE_LEVEL_FIELDS = figure_names("rate", "summary")
TRACE_LEVEL_FIELDS = figure_names("trace", "summary")
GOODPUT_FIELDS = figure_names("slo", "summary")
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


def summarise(
    run: RunRow, stats: Sequence[LevelStats], records: Sequence[RequestRecord], targets: Targets,
    search: SearchPlan | None = None, paired: tuple[str, int] | None = None,
    server: ServerFigures | None = None,
    client: Mapping[tuple[int, float | None], ClientCheck] | None = None,
    think_means: Mapping[int, float] | None = None,
    lead_ins: Mapping[int, users.LeadIn] | None = None,
    load_hosts: Sequence[LoadHost] = (),
    server_cpu: Mapping[tuple[int, float | None], ServerCpu] | None = None,
    host: Mapping[tuple[int, float | None], Sequence[tuple[int, HostLevel]]] | None = None,
) -> Summary:
    """The `--json` object of `run` and `summary`; `search`: how `--search` found Max C.
    A rate run has `max_rate` (requests/s) and no Max C or users, which need a concurrency.
    A users run has `users`: its measured max users beside the factor estimate from the Max C
    of `paired` (run id, Max C), the newest closed run of the same setup. `server`: per level,
    the target's own figures (server_levels), of which speculative decoding is shown; `client`:
    per level, the harness's self-check (a client-bound level is named in the warnings);
    `think_means` and `lead_ins`: a users run's mean think Z and lead-in per level, as its
    sweep stored them; `load_hosts`: where a `--ray` run's load workers ran; `server_cpu`:
    per level, the CPU of a server the run started and others' (a starved level is named in
    the warnings, and in the verdict when it decided Max C); `host`: per level, each serving
    host's figures over each pass (store.host_levels), shown per token (a level whose
    figures were lost is named in the warnings)."""
    levels: list[LevelRow]
    found: Summary
    stored = StoredRun.from_json(run.config)
    config = stored.config
    key = level_key(run.mode)
    if key == "R":
        levels, found, warnings = _rate_levels(run, stats, targets)
    elif key == "X":
        levels, found, warnings = _trace_levels(run, stats, records, targets)
    else:
        levels, found, warnings = _concurrency_levels(run, stats, targets, search)
        warnings += short_levels.flag(run, levels, records)
        intervals = level_intervals(records)
        found.update(_repeats(levels, records, cast(int, run.output_tokens), targets,
                              intervals))
    traced = any(s.number("mean_input_tokens_requested") is not None or s.speedup is not None
                 for s in stats)
    if traced:  # a trace replay, or lengths drawn from a trace
        by_level = {(s.concurrency, _round(s.rate)): s for s in stats}
        for row in levels:
            s = by_level[(row["concurrency"], row.get("rate"))]
            row.update(cast(LevelRow, {k: _round(s.value(k)) for k in TRACE_LEVEL_FIELDS}))
    asked = config.table_state if config else ""
    hosts_by_level = (levels_host(host, level_tokens(records), asked, records) if host
                      else {})
    for row in levels:
        figures = (server or {}).get((row["concurrency"], row.get("rate")), {})
        if traced:  # what the server's prefix cache found, beside what the trace shares
            row["prefix_hit_rate"] = _round(figures.get("prefix_hit_rate"))
        for name in SPEC_DECODE_FIELDS:
            row[name] = _round(figures.get(name))  # type: ignore[literal-required]
        checked = (client or {}).get((row["concurrency"], row.get("rate")))
        row["loop_lag_p50_ms"] = _round(checked.loop_lag_p50_ms) if checked else None
        row["loop_lag_p99_ms"] = _round(checked.loop_lag_p99_ms) if checked else None
        row["client_cpu_share"] = _round(checked.cpu_share) if checked else None
        row["client_cpu_wait_share"] = _round(checked.cpu_wait_share) if checked else None
        row["read_lag_mean_ms"] = _round(checked.read_lag_mean_ms) if checked else None
        row["unread_bytes_max"] = checked.unread_bytes_max if checked else None
        row["client_bound"] = checked.client_bound if checked else None
        if checked and checked.client_bound:
            warnings.append(describe_client(row_name(row), checked))
        cpu = (server_cpu or {}).get((row["concurrency"], row.get("rate")))
        row["server_cores"] = _round(cpu.server_cores) if cpu else None
        row["others_cpu_share"] = _round(cpu.others_share) if cpu else None
        row["idle_cpu_share"] = _round(cpu.idle_share) if cpu else None
        row["server_starved"] = cpu.server_starved if cpu else None
        if cpu and cpu.server_starved:
            warnings.append(describe_starved(row_name(row), cpu))
        level_hosts = hosts_by_level.get((row["concurrency"], row.get("rate")))
        row["host"] = cast(HostDict, _rounded(dict(level_hosts))) if level_hosts else None
        if row["host"] and row["host"]["missing"]:
            warnings.append(f"{row_name(row)}: host figures missing: {row['host']['missing']}")
        if row["host"] and row["host"]["table_state"] == cold_start.NOT_COLD:
            warnings.append(_not_cold(row, row["host"]))
    if key not in ("R", "X", "U"):  # a Max C verdict
        found["max_c_starved"] = _starved_verdict(levels, cast(int, found["max_c"]),
                                                  server_cpu or {})
    if key == "U":
        found.update(_users(run, levels, records, targets, paired, think_means, intervals,
                            lead_ins or {}))
        warnings += [f"U={row['concurrency']} is not in steady state, left out of Max users: "
                     f"{row['steady_state_note']}" for row in levels if not row["steady_state"]]
    turns = turn_rows(records)
    if stored.calibrated:
        sized = stats_by_level(first_turns(records), cast(int, run.output_tokens))  # new messages
        warnings += [w for s in sized if (w := prompt_warning(s, cast(int, run.input_tokens)))]
    estimated = sum(1 for r in records if r.ok and r.output_tokens_estimated)
    if estimated:
        warnings.append(f"{estimated} request(s) reported no usage: output tokens are chunk "
                        "counts (estimated)")
    short = sum(s.short_outputs for s in stats)
    if short:
        warnings.append(f"{short} request(s) ended before {run.output_tokens} output tokens")
    summary: Summary = {
        "run_id": run.run_id, "status": run.status, "device": run.device,
        "engine": run.engine, "model": run.model,
        "table_placement": run.table_placement, "label": run.label,
        "mode": run.mode, "rounds": run.rounds,
        "input_tokens": run.input_tokens, "measured_input_tokens": run.measured_input_tokens,
        "output_tokens": run.output_tokens,
        "targets": cast(TargetsDict, asdict(targets)), "statistic": targets.statistic,
        "judged": judged(targets.statistic, targets.ttft_of), "levels": levels,
    }
    summary.update(found)
    summary["turns"] = turns if len(turns) > 1 else None
    summary["token_times"] = bool(config and config.token_times)
    summary["workers"] = config.workers if config else 1
    summary["load_hosts"] = [cast(LoadHostDict, asdict(h)) for h in load_hosts]
    summary["warnings"] = warnings
    return summary


def _not_cold(row: LevelRow, host: HostDict) -> str:
    """The warning for the level of the run's first pass where `run --table-state cold` was
    asked and the level did not start cold."""
    resident, table_bytes = host["table_resident_bytes_start"], host["table_bytes"]
    held = (f"{size(resident, ',.1f')} of the table's {size(table_bytes, ',.1f')} were resident"
            if resident is not None and table_bytes else "its residency was not read")
    return (f"{row_name(row)}: --table-state cold was asked, but {held} at its start (pages "
            "another process maps or locks stay after a drop): it is not reported as a cold "
            "start")


def level_tokens(records: Sequence[RequestRecord]
                 ) -> dict[tuple[int, float | None], tuple[int, int]]:
    """Per level, the output and prompt tokens its requests reported (failed ones too: a
    request cut short read the table for the tokens it made)."""
    out: dict[tuple[int, float | None], tuple[int, int]] = {}
    for r in records:
        done, sent = out.get((r.concurrency, r.rate), (0, 0))
        out[(r.concurrency, r.rate)] = (done + (r.output_tokens or 0),
                                        sent + (r.input_tokens or 0))
    return out


def _starved_verdict(levels: Sequence[LevelRow], max_c: int,
                     server_cpu: Mapping[tuple[int, float | None], ServerCpu]) -> str | None:
    """The clause for the verdict when the level that stopped Max C (the lowest failing one
    above it) failed while the server was starved: Max C may be the machine's, not the
    server's."""
    above = [row for row in levels if not row["passes"] and row["concurrency"] > max_c]
    if not above:
        return None
    decider = min(above, key=lambda row: row["concurrency"])
    cpu = server_cpu.get((decider["concurrency"], decider.get("rate")))
    return starved_because(row_name(decider), cpu) if cpu and cpu.server_starved else None


def _users(run: RunRow, levels: list[LevelRow], records: Sequence[RequestRecord],
           targets: Targets, paired: tuple[str, int] | None,
           think_means: Mapping[int, float] | None,
           intervals: tuple[Mapping[int, confidence.Interval], Mapping[int, confidence.Interval]],
           lead_ins: Mapping[int, users.LeadIn]) -> Summary:
    """Max users (the highest passing user count among the levels in steady state), each
    level's duty cycle, mean think, response-time law and steady-state check, the levels
    whose verdict lies within their noise, beside the published factor estimate; Max C and its
    users do not apply to a users run."""
    config = StoredRun.from_json(run.config).config
    profile = config.profile if config else ""
    duty_target = config.duty_cycle if config else None
    target = users.target_duty(config)
    ttft, tps = intervals  # level_intervals: mean TTFT and TPS per level
    checks = users.level_checks(records, config, targets, tps, ttft, lead_ins)
    for row in levels:
        c = row["concurrency"]
        check = checks.get(c)
        steady = check.steady if check else None
        row["duty_cycle"] = _round(steady.duty_cycle) if steady else None
        lead_in = lead_ins.get(c)
        row["lead_in_cycles"] = _round(lead_in.cycles(c) if lead_in else None)
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
    row = cast(LevelRow, {k: _round(s.value(k)) for k in fields})
    row["passes"] = verdict.passes
    row["fails_because"] = verdict.reason or None
    return row


def _concurrency_levels(
    run: RunRow, stats: Sequence[LevelStats], targets: Targets, search: SearchPlan | None
) -> tuple[list[LevelRow], Summary, list[str]]:
    """Per-level rows, Max C with users, and warnings of a closed or burst run."""
    users_levels = level_key(run.mode) == "U"
    cap = capacity([point(s, targets.statistic, targets.ttft_of) for s in stats], targets,
                   users_levels)
    verdicts = {v.concurrency: v for v in cap.levels}
    levels = [_level_row(s, verdicts[s.concurrency], SUMMARY_LEVEL_FIELDS, targets)
              for s in stats]
    warnings = list(cap.warnings)
    missing = sorted(set(cast(list[int], run.levels)) - {s.concurrency for s in stats})
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
    max_cs = [capacity([point(s, targets.statistic, targets.ttft_of)
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
    run: RunRow, stats: Sequence[LevelStats], targets: Targets
) -> tuple[list[LevelRow], Summary, list[str]]:
    """Per-level rows (with send lag), the sustainable rate, and warnings of a rate run."""
    cap = rate_capacity(stats, targets)
    verdicts = dict(cap.levels)
    rated = [(s.rate, s) for s in stats if s.rate is not None]
    fields = (*RATE_LEVEL_FIELDS, *SUMMARY_LEVEL_FIELDS)
    levels = [_level_row(s, verdicts[rate], fields, targets) for rate, s in rated]
    warnings = list(cap.warnings)
    config = StoredRun.from_json(run.config).config
    planned = config.rates if config else ()
    missing = sorted(set(planned) - {rate for rate, _ in rated})
    if missing:
        warnings.append(f"rates not measured: {','.join(f'{r:g}' for r in missing)} req/s")
    found: Summary = {"max_rate": cap.max_rate, "max_c": None, "max_c_search": None,
                      "chat_users": None, "agentic_users": None, "users_note": USERS_NEED_C}
    return levels, found, warnings


def _trace_levels(run: RunRow, stats: Sequence[LevelStats], records: Sequence[RequestRecord],
                  targets: Targets) -> tuple[list[LevelRow], Summary, list[str]]:
    """Per-level rows of a timed trace replay (with its rate and send lag), the highest
    sustained speedup (the search's, with how it was found), each level over the trace's time
    axis, and warnings."""
    timed = sorted((s for s in stats if s.speedup is not None), key=lambda s: s.speedup or 0.0)
    verdicts = {cast(float, s.speedup): judge(point(s, targets.statistic, targets.ttft_of), targets)
                for s in timed}
    fields = (*RATE_LEVEL_FIELDS, *SUMMARY_LEVEL_FIELDS)
    levels = [_level_row(s, verdicts[cast(float, s.speedup)], fields, targets) for s in timed]
    sustained = max((x for x, v in verdicts.items() if v.passes), default=0.0)
    warnings = [f"X={s.speedup:g}: {s.lag_warning}" for s in timed if s.lag_warning]
    failed_below = [x for x, v in verdicts.items() if not v.passes and x < sustained]
    if failed_below:
        warnings.append(f"{sustained:g}x passes although slower replays fail "
                        f"({', '.join(f'{x:g}x' for x in failed_below)})")
    if not timed:
        warnings.append("no trace level to judge")
    elif not sustained:
        warnings.append("no speedup meets the targets")
    by_speedup: dict[float, list[RequestRecord]] = {}
    for r in records:
        if r.speedup is not None:
            by_speedup.setdefault(r.speedup, []).append(r)
    config = StoredRun.from_json(run.config).config
    missing = sorted(set(config.speedups if config else ()) - set(verdicts))
    if missing:
        warnings.append(f"speedups not measured: {', '.join(f'{x:g}x' for x in missing)}")
    how = None
    if config and config.search and verdicts:
        ran = sorted(by_speedup, key=lambda x: min(r.sent_at for r in by_speedup[x]))
        how = plan_speedup({x: v.passes for x, v in verdicts.items()}, ran).how
    elif sustained and sustained == timed[-1].speedup:
        warnings.append(f"sustains >= {sustained:g}x: no faster replay was tested")
    found: Summary = {
        "max_speedup": sustained, "max_speedup_search": how,
        "trace_rate": _round(timed[0].rate / (timed[0].speedup or 1.0)
                             if timed and timed[0].rate else None),
        "trace_windows": [{"speedup": x, "windows": [cast(TraceWindowDict, _rounded(asdict(w)))
                                                    for w in trace_windows(rs, x)]}
                          for x, rs in sorted(by_speedup.items())],
        "max_c": None, "max_c_search": None, "chat_users": None, "agentic_users": None,
        "users_note": TRACE_USERS_NEED_C}
    return levels, found, warnings


def _rounded(row: dict) -> dict:
    return {k: _round(v) for k, v in row.items()}


def _round(value: _T) -> _T:
    """A float to 3 decimals (what --json shows); anything else as it is."""
    return cast(_T, round(value, 3)) if isinstance(value, float) else value


def search_plan(store: Store, run_id: str, config: RunConfig,
                targets: Targets) -> SearchPlan | None:
    """Where the Max C search of a run stands, from its stored levels and probes; a users
    level not in steady state has no verdict (harness.results.search). None for a run whose
    levels are no concurrencies (a timed trace replay searches speedups: _trace_levels)."""
    if level_key(config.mode) not in ("C", "U"):
        return None
    records = store.requests(run_id)
    stats = stats_by_level(records, config.output_tokens, targets.slo)
    verdicts = outcomes([point(s, targets.statistic, targets.ttft_of) for s in stats], targets)
    unsettled: set[int] = set()
    users_levels = level_key(config.mode) == "U"
    if users_levels:
        checks = users.level_checks(records, config, targets, {}, {}, store.lead_ins(run_id))
        unsettled = {c for c, check in checks.items() if check.steady.flag is not None}
    verdicts = {c: ok for c, ok in verdicts.items() if c not in unsettled}
    if not verdicts:
        return SearchPlan(None, 0, False, False, "no level was in steady state",
                          tuple(sorted(unsettled)))
    probed = store.probes(run_id)
    swept = {c: ok for c, ok in verdicts.items() if c not in probed}
    probes = [(c, verdicts[c]) for c in probed if c in verdicts]
    if not swept:  # no swept level was in steady state: the probes start the bracket
        swept, probes = dict(probes), []
    resolution = USERS_RESOLUTION if users_levels else 0.0
    return plan(swept, probes, config.max_concurrency, resolution, unsettled)
