"""Prints a run's summary, a capacity result and a peer tool's view on the terminal: the
tables and lines of `run`, `summary` and `capacity`, read from the objects `--json` writes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from common.readable import size
from harness.results.metrics import LEVEL_FIGURES, level_key
from harness.results.report import SPEC_DECODE_FIELDS
from harness.results.request_figures import in_table, table_names
from harness.results.summary import IntervalDict, Summary, TargetsDict, TurnRow, row_name

# The LevelStats figures of the levels table after the load columns, and of the token timing
# table (tokens per chunk last before E2E), each under its declared header.
LEVEL_TABLE = ("requests", "errors", "short_outputs", "mean_ttft_ms", "p50_ttft_ms",
               "p90_ttft_ms", "p99_ttft_ms", "mean_tps", "p10_tps", "mean_prompt_tokens",
               "mean_output_tokens", "throughput_tps")
TRACE_TABLE = ("mean_input_tokens_requested", "mean_prompt_tokens", "mean_trace_prefix_tokens",
               "mean_cached_tokens")
TIMING_TABLE = ("mean_tpot_ms", "p50_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "p50_itl_ms",
                "p90_itl_ms", "p99_itl_ms", "mean_tokens_per_chunk", "p50_e2e_ms", "p90_e2e_ms",
                "p99_e2e_ms")


def _header(name: str) -> str:
    return LEVEL_FIGURES[name].header


def _load(summary: Summary) -> str:
    """The title's note of a run whose load was split: its processes, and on how many Ray
    nodes with the widest clock offset among them."""
    hosts = summary.get("load_hosts") or []
    if hosts:
        nodes = len({h["node_id"] for h in hosts})
        offset = max(abs(h["clock_offset_ms"]) for h in hosts)
        return (f", {len(hosts)} load process{'es' if len(hosts) > 1 else ''} on {nodes} Ray "
                f"node{'s' if nodes > 1 else ''} (clocks within {offset:.2f} ms of this host's)")
    return (f", {summary['workers']} load processes" if summary.get("workers", 1) > 1 else "")


def print_summary(summary: Summary, console: Console) -> None:
    title = (f"run {summary['run_id']} ({summary['status']}): {summary['model']} on "
             f"{summary['device'] or 'unlabelled device'}, engine {summary['engine'] or '-'}, "
             f"table {summary['table_placement'] or '-'}"
             + _load(summary))
    table = Table(title=title, title_justify="left")
    key = level_key(summary["mode"])
    rate_run, users_run, trace_run = key == "R", key == "U", key == "X"
    lags = (_header("p50_send_lag_ms"), _header("p99_send_lag_ms"))
    first = ((_header("rate"), *lags) if rate_run
             else (_header("speedup"), _header("rate"), *lags) if trace_run
             else ("users", "duty") if users_run else (_header("concurrency"),))
    for name in (*first, *(_header(f) for f in LEVEL_TABLE), "pass"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        lag = (_fmt(lv.get("p50_send_lag_ms"), 2), _fmt(lv.get("p99_send_lag_ms"), 2))
        load = ((f"{lv['rate']:g}", *lag) if rate_run
                else (f"{lv.get('speedup'):g}", _fmt(lv.get("rate"), 2), *lag) if trace_run
                else (str(lv["concurrency"]), _fmt(lv["duty_cycle"], 2)) if users_run
                else (str(lv["concurrency"]),))
        table.add_row(*load, *(_fmt(lv.get(f)) for f in LEVEL_TABLE),
                      "[green]yes[/]" if lv["passes"] else "[red]no[/]")
    console.print(table, width=max(console.width, 132))  # a narrow terminal must not hide figures
    _print_token_timing(summary, console)
    _print_declared(summary, console)
    _print_host(summary, console)
    t = summary["targets"]
    if t["slo"]:
        _print_goodput(summary, console)
    if rate_run:
        console.print(
            f"Sustainable rate = [bold]{summary['max_rate']:g}[/] requests/s ({t['statistic']} "
            f"TPS >= {t['tps_min']:g} tok/s, {first_token_name(t)} <= {t['ttft_max_ms']:g} ms, "
            f"no errors{_goodput_rule(t)}); "
            f"{summary['users_note']}", highlight=False)
    elif trace_run:
        _print_sustained(summary, console)
    elif users_run:
        _print_users(summary, console)
    else:
        _print_max_c(summary, console)
    if any(lv.get("mean_input_tokens_requested") is not None for lv in summary["levels"]):
        _print_trace_prompts(summary, console)
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
    for name in ("level", *map(_header, TIMING_TABLE[:-3]),
                 *(("accepted", "tok/step") if spec else ()), *map(_header, TIMING_TABLE[-3:])):
        table.add_column(name, justify="right")
    for lv in levels:
        per_chunk = lv.get("mean_tokens_per_chunk")
        chunk_text = ("-" if per_chunk is None else
                      f"{'~' if lv.get('tokens_per_chunk_estimated') else ''}{per_chunk:.2f}")
        table.add_row(
            row_name(lv), _fmt(lv["mean_tpot_ms"], 2), _fmt(lv["p50_tpot_ms"], 2),
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


def _print_declared(summary: Summary, console: Console) -> None:
    """The declared per-request figures' statistics (harness.results.request_figures) of the
    levels where an announcing one is neither missing nor zero."""
    names = table_names()
    levels = [lv for lv in summary["levels"] if in_table(lv)]
    if not levels:
        return
    table = Table(title="per-request figures", title_justify="left")
    for name in ("level", *map(_header, names)):
        table.add_column(name, justify="right")
    for lv in levels:
        table.add_row(row_name(lv), *(_declared_value(lv.get(n), n) for n in names))
    console.print(table, width=max(console.width, 132))


def _declared_value(value: object, name: str) -> str:
    fmt = LEVEL_FIGURES[name].format
    return "-" if value is None else fmt % value if fmt else str(value)


def _print_host(summary: Summary, console: Console) -> None:
    """Per level, the serving hosts' kernel counters (`--host-metrics`) beside TTFT and TPOT:
    the bytes the server's processes read from storage per token, major faults, the table's
    residency at the level's start and end, peak file-backed and pinned memory, the I/O stall
    and the disk's busy share."""
    levels = [lv for lv in summary["levels"] if lv.get("host")]
    if not levels:
        return
    sources = sorted({h["source"] for lv in levels if (h := lv.get("host"))})
    nodes = max(h["nodes"] for lv in levels if (h := lv.get("host")))
    table = Table(title=f"the serving host per level ({', '.join(sources)}, {nodes} "
                  f"node{'s' if nodes > 1 else ''}; disk B: the process tree's reads from "
                  "storage)", title_justify="left")
    for name in ("level", "TTFT mean", "TPOT mean", "disk B/out tok", "disk B/in tok",
                 "maj flt/out tok", "resident start", "resident end", "peak RssFile",
                 "peak pinned", "io stall", "disk busy"):
        table.add_column(name, justify="right")
    for lv in levels:
        h = lv["host"]
        assert h is not None
        table.add_row(row_name(lv), _fmt(lv.get("mean_ttft_ms")), _fmt(lv.get("mean_tpot_ms"), 2),
                      _fmt(h["tree_read_bytes_per_output_token"], 0),
                      _fmt(h["tree_read_bytes_per_prompt_token"], 0),
                      _fmt(h["major_faults_per_output_token"], 3),
                      _bytes(h["table_resident_bytes_start"]),
                      _bytes(h["table_resident_bytes_end"]), _bytes(h["peak_rss_file_bytes"]),
                      _bytes(h["peak_pinned_bytes"]), _share(h["io_stall_share"]),
                      _share(h["disk_busy_share"]))
    console.print(table, width=max(console.width, 132))
    for lv in levels:
        if (h := lv["host"]) and h.get("table_state"):
            n = h["table_state_requests"]
            console.print(f"{row_name(lv)} started on a {h['table_state']} table "
                          f"(--table-state; {_bytes(h['table_resident_bytes_start'])} of "
                          f"{_bytes(h['table_bytes'])} resident, as the agent read it): TTFT "
                          f"of its first {n} request"
                          f"{'' if n == 1 else 's'} {_fmt(h['table_state_ttft_ms'])} ms (mean), "
                          f"the level's {_fmt(lv.get('mean_ttft_ms'))} ms", highlight=False)


def _bytes(value: float | None) -> str:
    return "-" if value is None else size(value, ".1f")


def _print_users(summary: Summary, console: Console) -> None:
    t, u = summary["targets"], summary["users"]
    _print_steady_state(summary, console)
    who = f"{u['profile']} users" if u["profile"] else "users"
    duty = f", measured duty cycle {u['duty_cycle']:.2f}" if u["duty_cycle"] is not None else ""
    console.print(
        f"Max users = [bold]{u['max_users']}[/] {who} ({t['statistic']} TPS >= "
        f"{t['tps_min']:g} tok/s, {first_token_name(t)} <= {t['ttft_max_ms']:g} ms, no errors"
        f"{_goodput_rule(t)}{duty}; {_noise_note(summary)})",
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
    for name in ("users", "lead-in", "duty", "think Z ms", "law err %", "steady", "in flight",
                 _header("mean_tps"), "TPS interval", "pass"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        ci = lv.get("tps_ci")
        spread = (f"{_fmt(ci['low'])}-{_fmt(ci['high'])}"
                  f"{'' if ci['method'] == 'bootstrap' else ' (range)'}"
                  if ci and (ci["method"] == "bootstrap" or ci["repeats"] > 1) else "-")
        table.add_row(str(lv["concurrency"]), _fmt(lv.get("lead_in_cycles"), 1),
                      _fmt(lv["duty_cycle"], 2),
                      _fmt(lv["think_mean_ms"]), _fmt(lv["response_time_law_error_pct"]),
                      "yes" if lv["steady_state"] else "[red]no[/]",
                      "-" if lv["in_flight_mean"] is None
                      else f"{lv['in_flight_mean']:.1f} +- {lv['in_flight_sd']:.1f}",
                      _fmt(lv["mean_tps"]),
                      spread, ("[yellow]?[/] " if lv["within_noise"] else "")
                      + ("[green]yes[/]" if lv["passes"] else "[red]no[/]"))
    console.print(table, width=max(console.width, 100))


def _print_sustained(summary: Summary, console: Console) -> None:
    """A timed trace replay: the highest speedup meeting the targets, then the level it names
    (else the first) over the trace's time axis."""
    t, x = summary["targets"], summary["max_speedup"]
    rate = summary.get("trace_rate")
    at = f" = {x * rate:.3g} requests/s" if rate and x else ""
    console.print(
        f"Sustains [bold]{x:g}x[/] the trace's rate{at} ({t['statistic']} TPS >= "
        f"{t['tps_min']:g} tok/s, {first_token_name(t)} <= {t['ttft_max_ms']:g} ms, no errors"
        f"{_goodput_rule(t)}); {summary['users_note']}", highlight=False)
    if how := summary.get("max_speedup_search"):
        console.print(f"found by --search: {how}", highlight=False)
    levels = summary.get("trace_windows") or []
    shown = next((lv for lv in levels if lv["speedup"] == x), levels[0] if levels else None)
    if not shown or not shown["windows"]:
        return
    width = shown["windows"][0]["width_s"]
    table = Table(title=f"X={shown['speedup']:g} over the trace's time ({width:g} s windows of "
                  "trace time; arrivals per second of the replay)", title_justify="left")
    for name in ("trace s", "req", "req/s", "err", "TTFT mean", "TPOT mean"):
        table.add_column(name, justify="right")
    for w in shown["windows"]:
        table.add_row(f"{w['start_s']:g}", str(w["requests"]), _fmt(w["arrival_rate"], 2),
                      str(w["errors"]), _fmt(w["mean_ttft_ms"]), _fmt(w["mean_tpot_ms"], 2))
    console.print(table)


def _print_trace_prompts(summary: Summary, console: Console) -> None:
    """A trace replay's prompts per level: the tokens asked, the server's count, those the
    trace's blocks share with earlier requests and those the server found cached."""
    table = Table(title="trace prompts per level (mean tokens per request; hit rate: the "
                  "server's prefix cache, from its /metrics)", title_justify="left")
    for name in ("level", *map(_header, TRACE_TABLE), "shared %", "hit rate"):
        table.add_column(name, justify="right")
    for lv in summary["levels"]:
        asked, shared = lv.get("mean_input_tokens_requested"), lv.get("mean_trace_prefix_tokens")
        table.add_row(row_name(lv), *(_fmt(lv.get(f)) for f in TRACE_TABLE),
                      _share(shared / asked if asked and shared is not None else None),
                      _share(lv.get("prefix_hit_rate")))
    console.print(table)


def _print_turns(turns: list[TurnRow], console: Console) -> None:
    table = Table(title="per turn: the context grows, a prefix cache can reuse it",
                  title_justify="left")
    for name in ("turn", "req", "prompt tok", "cached tok", "TTFT mean"):
        table.add_column(name, justify="right")
    for row in turns:
        table.add_row(str(row["turn"]), str(row["requests"]), _fmt(row["mean_prompt_tokens"]),
                      _fmt(row["mean_cached_tokens"]), _fmt(row["mean_ttft_ms"]))
    console.print(table)


def first_token_name(t: TargetsDict) -> str:
    """What the TTFT target judged: TTFT, or the answer's first token with --ttft-of output."""
    return "TTFO" if t.get("ttft_of") == "output" else "TTFT"


def _print_max_c(summary: Summary, console: Console) -> None:
    t = summary["targets"]
    console.print(
        f"Max C = [bold]{summary['max_c']}[/] ({t['statistic']} TPS >= {t['tps_min']:g} tok/s, "
        f"{first_token_name(t)} <= {t['ttft_max_ms']:g} ms, no errors{_goodput_rule(t)})  ->  "
        f"chat users [bold]{summary['chat_users']}[/] (x{t['chat_factor']:g}), agentic users "
        f"[bold]{summary['agentic_users']}[/] (x{t['agentic_factor']:g})",
        highlight=False,
    )
    if starved := summary.get("max_c_starved"):
        console.print(f"[yellow]Max C {summary['max_c']} may be this machine's, not the "
                      f"server's:[/] {starved}", highlight=False)
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
    parts = [f"{row_name(lv)} {_share(lv.get('goodput_share'))} "
             f"({_fmt(lv.get('goodput_rps'))} req/s)" for lv in summary["levels"]]
    console.print(f"goodput ({slo}{needed}): {'; '.join(parts)}", highlight=False)


def _goodput_rule(t: TargetsDict) -> str:
    """The rule line's goodput clause, when a level must meet one."""
    return f", goodput >= {t['min_goodput']:.0%}" if t["min_goodput"] else ""


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
