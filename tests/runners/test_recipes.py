"""`engram-bench recipe`: each published deployment's launch command prints only engine settings
declared in runners/data/engine_settings.toml, each beside the source and version it was read
from; settings only a patched image reads say so; `--agent` adds the host agent's command."""

import csv
import shlex

import pytest

from engram_bench.parser import build_parser
from runners import engine_settings, recipes
from tests.helpers import ROOT, run_cli

RECIPES = recipes.load()
IDS = [f"{r['engine']}-{r['device']}-{r['nodes']}-{r['table_placement']}" for r in RECIPES]


def commands(text: str) -> list[str]:
    """The engine launch lines of a printed recipe: every line that is no comment and no
    engram-bench command."""
    return [line for line in text.splitlines()
            if line and not line.startswith(("#", "engram-bench "))]


def comment_of(text: str, printed: engine_settings.Printed) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(f"#   {printed.shown()}  [")]
    return line


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_every_printed_setting_is_declared_and_printed_with_its_source(recipe):
    text = recipes.render(recipe, agent=True)
    [line] = commands(text)
    printed = engine_settings.parse_command(recipe["engine"], line)
    assert engine_settings.problems(printed) == []
    declared = engine_settings.declared()
    for setting in printed:
        spec, comment = declared[setting.key], comment_of(text, setting)
        assert spec.source in comment
        if spec.origin == "patched-image":
            assert f"patched image only ({spec.image})" in comment
        else:
            assert spec.version[:12] in comment and "patched" not in comment
        if spec.default:
            assert f"the engine's default: {spec.default}" in comment


@pytest.mark.parametrize(("engine", "line", "problem"), [
    ("sglang", "python -m sglang.launch_server --engram-table-offload mmap",
     "sglang has no flag --engram-table-offload"),
    ("vllm", "vllm serve /m --engram-table-path /nvme/table.bin", "no flag --engram-table-path"),
    ("sglang", "python -m sglang.launch_server --ple-offload-backend mmap",
     "takes pinned, file"),
    ("sglang", "python -m sglang.launch_server --tp two", "--tp takes int"),
    ("vllm", """vllm serve /m --engram-config '{"table_path": "/nvme"}'""",
     "vllm has no field table_path in --engram-config"),
    ("vllm", """vllm serve /m --engram-config '{"cpu_offload": "yes"}'""", "takes bool"),
    ("vllm", "vllm serve /m --engram-config '[1]'", "no field (not a JSON object)"),
    ("vllm", "VLLM_ENGRAM_OFFLOAD=mmap vllm serve /m", "vllm has no env VLLM_ENGRAM_OFFLOAD"),
    ("vllm", "VLLM_PLE_TABLE_MEMORY=mmap vllm serve /m", "takes ram, disk"),
])
def test_an_undeclared_setting_or_value_is_named(engine, line, problem):
    found = engine_settings.problems(engine_settings.parse_command(engine, line))
    assert len(found) == 1 and problem in found[0]


def test_a_recipe_with_an_invented_flag_is_refused_before_anything_is_printed():
    recipe = {**RECIPES[0], "flags": [*RECIPES[0]["flags"], ["--engram-table-offload", "mmap"]]}
    with pytest.raises(recipes.RecipeError, match="has no flag --engram-table-offload"):
        recipes.render(recipe)


def test_a_setting_only_a_patched_image_reads_is_marked_with_its_image():
    [recipe] = recipes.find("vllm", "deepseek-v4.1-flash", "spark", 4)
    text = recipes.render(recipe)
    [disk] = [p for p in recipes.settings(recipe) if p.name == "DSV41_ENGRAM_DISK"]
    assert "patched image only (image not named in the published study)" in comment_of(text,
                                                                                        disk)
    assert shlex.split(commands(text)[0])[0] == "DSV41_ENGRAM_DISK=1"
    # upstream settings say no such thing
    [offload] = [p for p in recipes.settings(recipe) if p.name == "cpu_offload"]
    assert "patched" not in comment_of(text, offload)


def test_every_published_deployment_has_its_recipe():
    device = {"dgx-spark": "spark"}
    placement = {"memory": "device"}
    with open(ROOT / "results/reference/published_runs.csv") as f:
        runs = {(r["engine"], r["model"].lower(), device.get(r["device"], r["device"]),
                 int(r["nodes"]), placement.get(r["table_placement"], r["table_placement"]),
                 int(r["tp"])) for r in csv.DictReader(f)}
    for engine, model, dev, nodes, where, tp in runs:
        [recipe] = recipes.find(engine, model, dev, nodes, where)
        assert recipe["tp"] == tp


@pytest.mark.parametrize("recipe", RECIPES, ids=IDS)
def test_recipe_agent_watches_the_engine_process_and_the_file_it_reads_the_table_from(recipe):
    text = recipes.render(recipe, agent=True)
    [launch] = commands(text)
    [line] = [line for line in text.splitlines() if line.startswith("engram-bench agent")]
    args = build_parser().parse_args(shlex.split(line.replace(recipes.WORKER_PID, "4242"))[1:])
    assert args.command == "agent"
    assert args.table == ([recipe["table_path"]] if "table_path" in recipe else None)
    if recipe["nodes"] == 1:
        assert args.match in launch  # the text the engine's own command line holds
    else:  # Ray's workers are no children of the command: one agent per node, on its worker
        assert args.pid == 4242
    words = shlex.split(launch)
    if "--ple-offload-dir" in words:  # SGLang's file backend: the table is in that folder
        assert args.table == [words[words.index("--ple-offload-dir") + 1]]
    assert "engram-bench agent" not in recipes.render(recipe)


def test_the_declared_list_refuses_a_patched_setting_without_its_image(tmp_path):
    bad = tmp_path / "settings.toml"
    bad.write_text('[[setting]]\nengine = "vllm"\nform = "env"\nname = "X"\ntakes = "text"\n'
                   'meaning = "m"\nsource = "s"\nversion = "v"\norigin = "patched-image"\n')
    with pytest.raises(engine_settings.SettingsFileError, match="an image on a patched-image"):
        engine_settings.declared(bad)


def test_the_engines_page_lists_every_declared_setting():
    page = (ROOT / "docs/engines.md").read_text()
    missing = [s.name for s in engine_settings.declared().values() if f"`{s.name}`" not in page]
    assert missing == []


def test_recipe_cli_prints_each_placement_asked_for_and_the_agent():
    both = run_cli("recipe", "--engine", "vllm", "--model", "deepseek-v4.1-flash", "--device",
                   "spark", "--nodes", "8")
    assert both.returncode == 0 and both.stdout.count("vllm serve /models") == 2
    one = run_cli("recipe", "--engine", "sglang", "--model", "qwen3.8-flash-next", "--device",
                  "spark", "--placement", "nvme", "--agent")
    assert one.returncode == 0 and one.stdout.count("sglang.launch_server --model-path") == 1
    assert "engram-bench agent --match sglang.launch_server --table /nvme/ple" in one.stdout


def test_unknown_recipe_lists_the_published_ones():
    proc = run_cli("recipe", "--engine", "vllm", "--model", "qwen3.8-flash-next", "--device",
                   "spark")
    assert proc.returncode == 2 and "published: --engine sglang --model qwen3.8" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
