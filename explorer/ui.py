"""What every page shares: the database, cached queries, run choosers, downloads, targets."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import streamlit as st

from explorer import data, literal
from harness.results.handover import sources
from harness.results.metrics import Targets, level_key

MEASURED = "measured"


@st.cache_data(show_spinner=False, max_entries=8)
def _unreadable(path: str, version: tuple | None) -> str | None:
    return data.unreadable(Path(path))


def database() -> tuple[Path, tuple[int, int] | None]:
    """The results file and its version; a file that cannot be read stops the page with one
    sentence instead of a traceback."""
    path = data.db_path()
    version = data.file_version(path)
    problem = _unreadable(str(path), version)
    if problem:
        st.error(problem)
        st.stop()
    return path, version


@st.cache_data(show_spinner=False, max_entries=32)
def _runs(path: str, version: tuple | None) -> pd.DataFrame:
    return data.runs(Path(path))


@st.cache_data(show_spinner=False, max_entries=64)
def _levels(path: str, version: tuple | None, run_ids: tuple[str, ...]) -> pd.DataFrame:
    return data.levels(Path(path), list(run_ids))


@st.cache_data(show_spinner=False, max_entries=16)
def _turns(path: str, version: tuple | None, run_id: str) -> pd.DataFrame:
    return data.turns(Path(path), run_id)


@st.cache_data(show_spinner=False, max_entries=16)
def _users_checks(path: str, version: tuple | None, run_id: str,
                  targets: Targets) -> pd.DataFrame:
    return data.users_checks(Path(path), run_id, targets)


@st.cache_data(show_spinner=False)
def _published() -> tuple[pd.DataFrame, pd.DataFrame]:
    return data.published_runs(), data.published_levels()


def measured_runs() -> pd.DataFrame:
    path, version = database()
    return _runs(str(path), version)


def published() -> tuple[pd.DataFrame, pd.DataFrame]:
    return _published()


def levels_for(run_ids: list[str]) -> pd.DataFrame:
    """Levels of measured and published runs together; `source` tells them apart."""
    path, version = database()
    pub_runs, pub_levels = published()
    names = set(pub_runs["run_id"])
    measured = [r for r in run_ids if r not in names]
    frames = []
    if measured:
        frame = _levels(str(path), version, tuple(measured)).copy()
        if not frame.empty:
            frame["source"] = MEASURED
            frames.append(frame)
    chosen = pub_levels[pub_levels["run_id"].isin(run_ids)]
    if not chosen.empty:
        frames.append(chosen)
    if not frames:
        return pd.DataFrame()
    order = {r: i for i, r in enumerate(run_ids)}
    out = pd.concat(frames, ignore_index=True)
    runs = measured_runs()
    users_ids = set(runs[runs["mode"].map(level_key) == "U"]["run_id"]) & set(measured) \
        if "mode" in runs else set()
    if users_ids:  # the steady-state and noise checks of each users level, as the summary's
        checks = pd.concat([_users_checks(str(path), version, r, targets())
                            for r in sorted(users_ids)], ignore_index=True)
        out = out.merge(checks, on=["run_id", "concurrency"], how="left")
    return out.sort_values(["run_id", "concurrency"], key=lambda s: s.map(order)
                           if s.name == "run_id" else s).reset_index(drop=True)


def run_row(run_id: str) -> dict:
    """A measured run's row of `data.runs` ({} for a published run)."""
    runs = measured_runs()
    rows = runs[runs["run_id"] == run_id].to_dict("records") if not runs.empty else []
    return rows[0] if rows else {}


def turns_of(run_id: str) -> pd.DataFrame:
    """Per level and turn of a run (`data.turns`); one turn per level for a single-turn run."""
    path, version = database()
    return _turns(str(path), version, run_id)


def users_for(run_ids: list[str]) -> pd.DataFrame:
    """The users runs among `run_ids` judged by Max users beside their estimate
    (`data.users_table`, the paired closed runs' levels loaded for it); empty if none."""
    runs = measured_runs()
    pairs = data.users_runs(runs, set(run_ids))
    if not pairs:
        return pd.DataFrame(columns=data.USERS_COLUMNS)
    ids = list(dict.fromkeys([*pairs, *(p for p in pairs.values() if p)]))
    return data.users_table(levels_for(ids), runs, pairs, targets())


def run_labels() -> dict[str, str]:
    """Every selectable run: measured ones first (newest first), then the published ones. A
    label is plain text (its parts shortened), for choosers as it is; a markdown element takes
    it through `literal.markdown`, a chart through `literal.plotly`."""
    labels = {}
    for row in measured_runs().to_dict("records"):
        parts = [row["run_id"], row["device"] or "-", row["model"] or "-",
                 f"table {row['table_placement'] or '-'}"]
        if isinstance(row["label"], str) and row["label"]:  # NULL (NaN here) when unset
            parts.append(row["label"])
        labels[row["run_id"]] = " · ".join(literal.shorten(str(p)) for p in parts)
    for run_id in published()[0]["run_id"]:
        labels[run_id] = f"published · {run_id}"
    return labels


def empty_state() -> bool:
    """True (after explaining how to make data) when there is no measured run to show."""
    path, version = database()
    if version is None or measured_runs().empty:
        st.info(f"No measured runs in {literal.markdown(str(path))} yet. Make one with "
                "`make bench` (the bundled Engram server) or `make bench "
                "URL=http://host:port/v1 MODEL=name`, or open another file with `make explore "
                "DB=path`. The published reference runs are on the **Published reference** "
                "page.")
        return True
    return False


def targets() -> Targets:
    """The targets set on the Capacity page (defaults: docs/design.md)."""
    return st.session_state.get("targets", Targets())


def download(label: str, frame_fn: Callable[[], pd.DataFrame], file_name: str, rows: int,
             key: str) -> None:
    """A CSV download whose file is built only when clicked."""
    st.download_button(f"{label} ({rows} rows)", data=partial(_csv, frame_fn),
                       file_name=file_name, mime="text/csv", key=key, on_click="ignore")


def report_download(run_ids: list[str], key: str) -> None:
    """The file `engram-bench report` writes for the measured runs of `run_ids` under the
    targets set here (only its time differs), built only when clicked; none for none."""
    runs = measured_runs()
    measured = [r for r in run_ids if not runs.empty and r in set(runs["run_id"])]
    if measured:
        st.download_button("Download report", data=partial(report_bytes, measured, targets()),
                           file_name=sources.report_name(measured), mime="text/html", key=key,
                           on_click="ignore")


def report_bytes(run_ids: list[str], run_targets: Targets) -> bytes:
    """The report of runs of the explorer's results file."""
    path, _ = database()
    return sources.build_report([(path, r) for r in run_ids], run_targets).html.encode("utf-8")


def _csv(frame_fn: Callable[[], pd.DataFrame]) -> bytes:
    return data.to_csv(frame_fn())
