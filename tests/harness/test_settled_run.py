"""A run is settled once, at the CLI: below it nothing reads the parsed command line, checks
the mode again or resolves the prompts again."""

import ast
import json
import signal
from pathlib import Path

from engram_bench import cli
from harness.run import modes
from harness.run.modes.base import LoadMode
from tests.helpers import ROOT

# The flag declarations the CLI calls while it settles a run: a mode adds its own flags and
# turns them into RunConfig fields (harness.run.modes and its modules); an engine adds its
# own and turns them into its typed options (runners.engines). Nothing else takes a Namespace.
MODE_FLAG_HOOKS = {"read_flags", "implied", "default_levels", "chosen"}
ENGINE_FLAG_HOOKS = {"options", "given_flags", "chosen"}
# a program of its own, with its own command line: the fake server's `main`
OWN_PROGRAMS = {ROOT / "harness" / "mock_server.py"}


def _namespace_takers(path: Path) -> list[str]:
    """The functions of a module with a parameter annotated argparse.Namespace."""
    takers = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if any(p.annotation is not None and "Namespace" in ast.unparse(p.annotation)
                   for p in params):
                takers.append(node.name)
    return takers


def _imports_argparse(path: Path) -> bool:
    return any((isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names))
               or (isinstance(node, ast.ImportFrom) and node.module == "argparse")
               for node in ast.walk(ast.parse(path.read_text(), str(path))))


def test_nothing_in_the_harness_but_the_modes_flag_declarations_sees_the_command_line():
    mode_dir = ROOT / "harness" / "run" / "modes"
    wrong = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path in OWN_PROGRAMS:
            continue
        where = path.relative_to(ROOT)
        if path.parent == mode_dir:
            wrong += [f"{where}: {name}" for name in _namespace_takers(path)
                      if name not in MODE_FLAG_HOOKS]
        elif _imports_argparse(path) or _namespace_takers(path):
            wrong.append(f"{where} reads the command line")
    assert wrong == []


def test_an_engine_reads_its_flags_only_into_its_options():
    wrong = [f"{path.name}: {name}"
             for path in sorted((ROOT / "runners" / "engines").glob("*.py"))
             for name in _namespace_takers(path) if name not in ENGINE_FLAG_HOOKS]
    assert wrong == []


def test_a_run_checks_its_mode_and_resolves_its_prompts_once(start_mock, tmp_path,
                                                              monkeypatch, capsys):
    server = start_mock()
    calls = {"check": 0, "prompts": 0}
    check, prompts = modes.check, LoadMode.prompts

    def counted_check(config):
        calls["check"] += 1
        return check(config)

    def counted_prompts(self, config):
        calls["prompts"] += 1
        return prompts(self, config)

    monkeypatch.setattr(modes, "check", counted_check)
    monkeypatch.setattr(LoadMode, "prompts", counted_prompts)
    try:
        code = cli.main(["run", "--url", server.url, "--levels", "1", "--rounds", "1",
                         "--input-tokens", "16", "--output-tokens", "4", "--no-progress",
                         "--json", "--db", str(tmp_path / "b.duckdb")])
    finally:  # cmd_run installed its own
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
    assert code == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["levels"]
    assert calls == {"check": 1, "prompts": 1}


def test_the_cli_hands_the_command_line_down_twice():
    """Following `args` from cmd_run, it goes below the CLI only into the modes' registry
    (their flags into RunConfig fields) and the engines' (an engine and its options)."""
    handed = []
    for path in sorted((ROOT / "engram_bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in {"modes", "engines"}
                    and any(isinstance(a, ast.Name) and a.id == "args" for a in node.args)):
                handed.append(f"{path.name}: {ast.unparse(node.func)}")
    assert handed == ["run_config.py: engines.chosen", "run_config.py: modes.read_flags"]
