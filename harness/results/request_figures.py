"""Per-request figures declared once: each is a value of every request, its level statistics
and where they show, so that a new figure is one entry in `REQUEST_FIGURES`. From each entry
come the level statistics in Python (`level_values`) and in the `levels` view (`level_sql`,
the same rule), the summary's level rows and `--json`, the headers and formats of the printed
tables and the explorer's level columns (harness.results.metrics adds their `Figure`s to
LEVEL_FIGURES). Where a figure's value lives (`source`):
- "column": a `requests` column of its own, added in place to a file that lacks it and
  filled for its old rows where the entry says how, in the store's insert; the client sets it
  once, as its request ends (`RequestRecord.figures`): nothing here runs per chunk;
- "record": one of the timings and token counts every request record is made of (tables.sql,
  `RequestRecord`), which the wire sets as it reads;
- "derived": worked out from those (`RequestRecord`'s property of its name, and the same rule
  in SQL, a column of the `request_figures` view).

Figures that are not one statistic of one value (pooled token-weighted ITL, throughput over
busy time, goodput, the users checks) stay hand-written in metrics.py and views.sql."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from harness.results.figure import Figure, Group
from harness.results.quantiles import mean, quantile

# what a level shows of a value: its mean, a quantile, how many requests have it (a
# non-null value, or true for a yes/no), or its distinct values ("chunks,usage")
Statistic = Literal["mean", "p50", "p90", "p99", "p10", "p1", "count", "values"]
_QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p10": 0.1, "p1": 0.01}
Source = Literal["column", "record", "derived"]
Value = float | int | str | bool | None


@dataclass(frozen=True, slots=True)
class RequestFigure:
    """One per-request figure. `name` is its `requests` column (or `request_figures` view
    column where derived), its `RequestRecord` attribute (or key in `RequestRecord.figures`
    where it has a column of its own); a level's statistic of it is `<statistic>_<level_as>`
    ("p90_ttfo_ms"), `level_as` being the name unless given. `derived`: the SQL that works it
    out from the record's columns (`r.` each), as its RequestRecord property does.
    A request may have no value of any figure (NULL: a failed request, a server that counts
    no tokens), and no statistic counts it; `missing_reason` names the declared column that
    says why, where a missing value needs saying (a stream that reasoned and never answered
    has no TTFO). `old_rows`: the SQL value an upgraded file's rows read for a column of its
    own, unless its `missing_reason` is set. `table`: the summary's
    printed table of such figures has its statistics (the others show in the levels, timing
    and trace tables, which name theirs); `announces`: a level where one of them is neither
    missing nor zero is in that table (other levels have nothing of note there)."""

    name: str
    sql_type: str  # "DOUBLE", "INTEGER", "VARCHAR", "BOOLEAN"
    label: str  # "TTFO": what a reader sees, beside the statistic's name
    unit: str = ""
    statistics: tuple[Statistic, ...] = ("mean", "p50", "p90", "p99")
    format: str = "%.1f"  # the explorer's and the printed table's number format
    header: str = ""  # the printed tables' short name ("TTFO"); "": the label
    source: Source = "column"
    level_as: str = ""
    derived: str = ""
    group: Group = "level"
    old_rows: str | None = None
    missing_reason: str | None = None
    table: bool = True
    announces: bool = False
    summary: bool = True
    explorer: bool = True

    def level_name(self, statistic: Statistic) -> str:
        return f"{statistic}_{self.level_as or self.name}"

    def level_figure(self, statistic: Statistic) -> Figure:
        """How the level's statistic is named and shown (harness.results.figure)."""
        counted = statistic in ("count", "values")
        short = self.header or self.label
        # a speed's low percentile, the slow tail, names its figure first: "TPS p10"
        low = statistic in ("p10", "p1")
        label = (self.label if counted or len(self.statistics) == 1
                 else f"{self.label} {statistic}" if low else f"{statistic} {self.label}")
        # "TTFT mean", then "p50", "p99" beside it; a lone statistic is the figure's name
        header = (short if counted or len(self.statistics) == 1
                  else f"{short} {statistic}" if statistic == self.statistics[0] or low
                  else statistic)
        return Figure(label, "" if counted else self.unit, header=header,
                      format="%d" if statistic == "count" else
                      "%s" if statistic == "values" else self.format,
                      group=self.group, summary=self.summary,
                      # the explorer's level columns are numbers and yes/no checks
                      explorer=self.explorer and statistic != "values")


_TPS = "CASE WHEN r.ok AND r.latency_ms > 0 THEN r.output_tokens / (r.latency_ms / 1000.0) END"
_TPOT = ("CASE WHEN r.ok AND r.output_tokens > 1 AND r.ttft_ms IS NOT NULL "
         "THEN (r.latency_ms - r.ttft_ms) / (r.output_tokens - 1) END")

# The declared figures, in the order their level statistics show.
REQUEST_FIGURES: tuple[RequestFigure, ...] = (
    # the first streamed token of any kind, after the send: the field's TTFT
    RequestFigure("ttft_ms", "DOUBLE", "TTFT", "ms", source="record", table=False),
    # output tokens over the whole request time, TTFT included (docs/design.md); its low
    # percentiles are the slow requests'
    RequestFigure("tps", "DOUBLE", "TPS", "tok/s", ("mean", "p50", "p10", "p1"),
                  source="derived", derived=_TPS, table=False),
    # the server's usage.prompt_tokens and completion tokens: what was really sent and made
    RequestFigure("input_tokens", "INTEGER", "prompt tokens", statistics=("mean",),
                  header="in tok", source="record", level_as="prompt_tokens", table=False),
    RequestFigure("output_tokens", "INTEGER", "output tokens", statistics=("mean",),
                  header="out tok", source="record", table=False),
    # the time per output token after the first
    RequestFigure("tpot_ms", "DOUBLE", "TPOT", "ms/token", format="%.2f", source="derived",
                  derived=_TPOT, table=False),
    RequestFigure("tokens_per_chunk", "DOUBLE", "tokens per chunk", statistics=("mean",),
                  format="%.2f", header="tok/chunk", source="record", table=False),
    # the whole request, send to last byte
    RequestFigure("latency_ms", "DOUBLE", "E2E", "ms", ("p50", "p90", "p99"),
                  source="record", level_as="e2e_ms", table=False),
    # a trace replay: the prompt tokens asked for (the trace's, scaled and clipped), those
    # its hash ids share with the pass's earlier requests, and those the server said it found
    # cached
    RequestFigure("input_tokens_requested", "INTEGER", "prompt tokens asked",
                  statistics=("mean",), header="asked tok", source="record", group="trace",
                  table=False),
    RequestFigure("trace_prefix_tokens", "INTEGER", "prompt tokens shared (trace)",
                  statistics=("mean",), header="shared tok", source="record", group="trace",
                  table=False),
    RequestFigure("cached_tokens", "INTEGER", "cached tokens", statistics=("mean",),
                  header="cached tok", source="record", group="trace", table=False),
    # the first token of the answer (content or a tool call), after any reasoning: TTFT where
    # the stream did not reason, and what an older file's rows read
    RequestFigure("ttfo_ms", "DOUBLE", "TTFO", "ms", old_rows="ttft_ms",
                  missing_reason="ttfo_missing"),
    # why a request has no TTFO though it streamed: it reasoned and never answered
    RequestFigure("ttfo_missing", "VARCHAR", "no answer", statistics=("count",),
                  header="no ans", announces=True),
    RequestFigure("reasoning_ms", "DOUBLE", "reasoning time", "ms", ("mean", "p50", "p99"),
                  header="reason", old_rows="CASE WHEN ttft_ms IS NOT NULL THEN 0.0 END"),
    RequestFigure("reasoning_tokens", "INTEGER", "reasoning tokens", statistics=("mean",),
                  header="reason tok", announces=True),
    # "usage": completion_tokens_details.reasoning_tokens; "chunk_usage": the reasoning chunks'
    # per-chunk usage summed; "chunks": no usage, a token a reasoning chunk (an estimate)
    RequestFigure("reasoning_tokens_source", "VARCHAR", "reasoning tokens from",
                  statistics=("values",), header="from"),
    # the server reported more reasoning tokens than completion tokens (stored as reported)
    RequestFigure("reasoning_over_completion", "BOOLEAN", "reasoning > completion",
                  statistics=("count",), header="over", announces=True),
    # the answer's own speed: its tokens (output less reasoning) over the time after TTFO
    RequestFigure("answer_tps", "DOUBLE", "answer TPS", "tok/s", ("mean", "p50"),
                  header="ans TPS"),
)
# the figures with a `requests` column of their own
COLUMN_FIGURES = tuple(f for f in REQUEST_FIGURES if f.source == "column")


def level_figures(figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> dict[str, Figure]:
    """Every level statistic of `figures`, by its level name, in declaration order."""
    return {f.level_name(s): f.level_figure(s) for f in figures for s in f.statistics}


def table_names(figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> tuple[str, ...]:
    """The level statistics the summary's printed table of declared figures shows."""
    return tuple(f.level_name(s) for f in figures if f.table for s in f.statistics)


def in_table(row: Mapping[str, object],
             figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> bool:
    """Whether a summary level row has something the printed table shows: a statistic of an
    announcing figure that is neither missing nor zero."""
    return any(row.get(f.level_name(s)) not in (None, 0)
               for f in figures if f.announces for s in f.statistics)


def insert_columns(figures: Sequence[RequestFigure] = COLUMN_FIGURES) -> tuple[str, ...]:
    return tuple(f.name for f in figures)


def row_values(values: Mapping[str, Value],
               figures: Sequence[RequestFigure] = COLUMN_FIGURES) -> tuple[Value, ...]:
    """A record's values of the figures with a column of their own, in column order (None
    where it has none)."""
    return tuple(values.get(f.name) for f in figures)


def derived_sql(figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> str:
    """The `request_figures` view's derived columns (each line ends in a comma, as it sits
    among the view's other columns): the SQL form of their RequestRecord properties."""
    return "".join(f"    {f.derived} AS {f.name},\n" for f in figures if f.source == "derived")


def add_columns_sql(figures: Sequence[RequestFigure] = COLUMN_FIGURES) -> str:
    """The `requests` columns, added where a file lacks them (safe to run again)."""
    return "".join(f"ALTER TABLE requests ADD COLUMN IF NOT EXISTS {f.name} {f.sql_type};\n"
                   for f in figures)


def fill_old_rows_sql(figures: Sequence[RequestFigure] = COLUMN_FIGURES) -> str:
    """What an upgraded file's rows read for a column it lacked: run once, as it upgrades,
    after `add_columns_sql`; a row that says why its value is missing is left so."""
    out = []
    for f in figures:
        if f.old_rows is None:
            continue
        unexplained = f" AND {f.missing_reason} IS NULL" if f.missing_reason else ""
        out.append(f"UPDATE requests SET {f.name} = {f.old_rows} "
                   f"WHERE {f.name} IS NULL{unexplained};\n")
    return "".join(out)


def _statistic_sql(f: RequestFigure, statistic: Statistic, alias: str) -> str:
    column = f"{alias}.{f.name}"
    ok = f"{alias}.ok"
    if statistic == "mean":
        return f"avg({column}) FILTER (WHERE {ok})"
    if statistic == "count":
        kept = column if f.sql_type == "BOOLEAN" else f"{column} IS NOT NULL"
        return f"count(*) FILTER (WHERE {ok} AND {kept})"
    if statistic == "values":
        return f"string_agg(DISTINCT {column}, ',' ORDER BY {column}) FILTER (WHERE {ok})"
    return f"quantile_cont({column}, {_QUANTILES[statistic]}) FILTER (WHERE {ok})"


def level_sql(alias: str = "q", figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> str:
    """The `levels` view's columns of every declared statistic (each line ends in a comma,
    as it sits among the view's other columns): the SQL form of `level_values`."""
    return "".join(f"    {_statistic_sql(f, s, alias)} AS {f.level_name(s)},\n"
                   for f in figures for s in f.statistics)


def _statistic(values: list[Value], statistic: Statistic) -> Value:
    if statistic == "count":
        return sum(1 for v in values if v is not None and v is not False)
    present = [v for v in values if v is not None]
    if statistic == "values":
        return ",".join(sorted({str(v) for v in present})) or None
    numbers = [float(v) for v in present if not isinstance(v, str)]
    if statistic == "mean":
        return mean(numbers)
    return quantile(numbers, _QUANTILES[statistic])


_PYTHON_TYPES = {"count": "int", "values": "str | None"}


def row_type_source(figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> str:
    """harness/results/declared_row.py: the summary's level row keys of `figures`, written out
    so that mypy sees them (a TypedDict made at runtime is invisible to it); a test checks the
    file against the declaration, `python -m harness.results.request_figures` writes it."""
    keys = "".join(f"    {f.level_name(s)}: {_PYTHON_TYPES.get(s, 'float | None')}\n"
                   for f in figures if f.summary for s in f.statistics)
    return ('"""The summary level row\'s keys of the declared per-request figures: written '
            'by\n`python -m harness.results.request_figures` from its REQUEST_FIGURES; do not '
            'edit."""\n'
            "\nfrom __future__ import annotations\n\nfrom typing import TypedDict\n\n\n"
            "class DeclaredRow(TypedDict, total=False):\n"
            '    """The declared figures\' level statistics (harness.results.request_figures)."""\n'
            + ("\n" + keys if keys else ""))


def level_values(good: Iterable[Mapping[str, Value]],
                 figures: Sequence[RequestFigure] = REQUEST_FIGURES) -> dict[str, Value]:
    """Each declared statistic over a level's successful requests' values (`good`: each
    request's values by figure name), by level name: the rule of `level_sql`."""
    rows = list(good)
    return {f.level_name(s): _statistic([r.get(f.name) for r in rows], s)
            for f in figures for s in f.statistics}


if __name__ == "__main__":
    print(row_type_source(), end="")
