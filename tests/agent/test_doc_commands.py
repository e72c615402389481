"""The CPU-only example commands of the README and docs, run as written (from a folder laid out like the
repository root): each must still appear verbatim in its file, and exit 0."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from policy_refusals import DEVICE, REFUSED
from ptxbench.agent.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [
    ("README.md", "ptxbench optimize smoke_gemm_bf16_m256_n256_k512 --no-gpu --turns 2"),
    ("tools/README.md", "ptxbench compile tests/data/kernels/wgmma_sm90a.ptx --json"),
    ("tools/README.md", "ptxbench compile tests/data/kernels/tcgen05_sm100a.ptx --arch sm_100a"),
    ("docs/examples/README.md", "ptxbench score docs/examples/optimize-gemm-tuner"),
    ("docs/examples/README.md", "ptxbench report docs/examples/optimize-gemm-tuner --out report-example"),
    ("docs/examples/README.md", "ptxbench export docs/examples/synth-repairs/run --recipe fixit --out data/fixit --no-require-target"),
]


@pytest.mark.parametrize("doc,command", EXAMPLES, ids=[c for _, c in EXAMPLES])
def test_documented_command_runs_as_written(doc, command, tmp_path, monkeypatch):
    assert command in (ROOT / doc).read_text(), f"{doc} no longer shows `{command}`: update this list"
    for folder in ("docs", "tests"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PTXBENCH_RUNS", str(tmp_path / "runs"))
    result = CliRunner().invoke(app, shlex.split(command)[1:])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output


def test_the_synth_example_says_why_rows_are_dropped_without_the_lifted_filter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["export", str(ROOT / "docs/examples/synth-repairs/run"), "--recipe", "fixit",
                                      "--out", "out", "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert "0 fixit rows from 8 trajectories" in result.output
    assert "8 trajectories gave no row: the target instructions were not seen executing" in result.output


def test_the_usage_line_names_the_option_that_lists_the_no_gpu_examples_workload():
    """The README's no-GPU example runs a smoke workload, which `ptxbench workloads` lists only with --all."""
    assert "ptxbench workloads [--all] [--json]" in (ROOT / "README.md").read_text()
    smoke = "smoke_gemm_bf16_m256_n256_k512"
    assert smoke in CliRunner().invoke(app, ["workloads", "--all"]).output
    assert smoke not in CliRunner().invoke(app, ["workloads"]).output


@pytest.mark.parametrize("command", ["eval", "score"])
def test_the_usage_lines_name_no_gpu_where_the_command_takes_it(command):
    """A machine with no GPU needs `eval --no-gpu` (and `score --re-evaluate --no-gpu`): the README's usage lines left
    it out, and `eval` there refused to run without it."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines()
                if line.lstrip().startswith(f"ptxbench {command} "))
    assert "[--no-gpu]" in line, line
    assert "--no-gpu" in " ".join(CliRunner().invoke(app, [command, "--help"], terminal_width=200).output.split())


def _commands(command, path=()):
    """(command path, command) for every leaf command of the app (click's or typer's own copy of click alike)."""
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield " ".join(path), command


def test_every_option_of_every_command_is_named_in_the_docs():
    """The README's usage lines, docs/ and the folder READMEs name every option (either form of a --x/--no-x flag):
    --gpus, --parallel, --no-report, --temperature, --no-dedup ... were in --help alone."""
    import re

    import typer

    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"),
                                             *ROOT.glob("*/*/README.md")])
    missing = [f"{path} {'/'.join(param.opts + param.secondary_opts)}"
               for path, command in _commands(typer.main.get_command(app))
               for param in command.params
               if getattr(param, "param_type_name", "") == "option" and "--help" not in param.opts
               and not any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", docs)
                           for name in param.opts + param.secondary_opts)]
    assert not missing, f"options no doc names: {missing}"


def test_the_help_of_each_run_folder_default_names_the_runs_root():
    """optimize's --run-dir said `runs/<time>_...` while the folder goes under $PTXBENCH_RUNS when that is set."""
    import typer

    commands = dict(_commands(typer.main.get_command(app)))
    for name in ("optimize", "bench", "synth-repairs"):
        (run_dir,) = [p for p in commands[name].params if "--run-dir" in getattr(p, "opts", [])]
        assert "<runs root>" in run_dir.help, (name, run_dir.help)
    assert "$PTXBENCH_RUNS" in " ".join(p.help or "" for p in commands["optimize"].params)


DOCS = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("docs/*/README.md"), *ROOT.glob("*/README.md"),
        *ROOT.glob("*/*/README.md")]


def _options_by_command() -> dict[str, set[str]]:
    """Each command's option names (both forms of a flag); a group (`repairs`) takes its subcommands' together."""
    import typer

    out: dict[str, set[str]] = {}
    for path, command in _commands(typer.main.get_command(app)):
        names = {n for p in command.params if getattr(p, "param_type_name", "") == "option"
                 for n in p.opts + p.secondary_opts} | {"--help"}
        out.setdefault(path.split()[0], set()).update(names)
    return out


def misnamed_options(text: str, options: dict[str, set[str]]) -> list[str]:
    """`line N: CMD --opt` (N: the command's line) for every option a `ptxbench CMD ...` names that CMD does not take:
    in an inline code span up to its closing backtick (a span may go on to the next line, never past its paragraph),
    in a code block up to a `#` comment, with the indented `[--x ...]` lines below it."""
    import re

    command = re.compile(r"ptxbench(?:\.agent)? (" + "|".join(sorted(options, key=len, reverse=True)) + r")(?![\w-])")
    out = []
    for m in command.finditer(text):
        paragraph = text[text.rfind("\n\n", 0, m.start()) + 1:m.start()].replace("```", "")
        line_start = text.rfind("\n", 0, m.start()) + 1
        if paragraph.count("`") % 2 == 1:  # inside an inline code span
            chunk = [text[m.end():].split("`")[0].split("\n\n")[0]]
        else:
            line = text[line_start:text.find("\n", m.end()) % (len(text) + 1)]
            chunk = [text[m.end():line_start + len(line)]]
            indent = len(line) - len(line.lstrip())
            for below in text[line_start + len(line) + 1:].splitlines():
                if not below.lstrip().startswith(("[", "--")) or len(below) - len(below.lstrip()) <= indent:
                    break
                chunk.append(below)
        for opt in re.findall(r"(?<![\w-])--[a-z][\w-]*", " ".join(c.split(" #")[0] for c in chunk)):
            if opt not in options[m.group(1)]:
                out.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(1)} {opt}")
    return out


def test_every_option_a_doc_gives_a_command_is_one_it_takes():
    """The other direction of the test above: a renamed or removed option left in a usage line or example fails here."""
    options = _options_by_command()
    wrong = {str(d.relative_to(ROOT)): found for d in DOCS if (found := misnamed_options(d.read_text(), options))}
    assert wrong == {}


def test_a_misnamed_option_is_caught():
    options = _options_by_command()
    doc = ("    ptxbench optimize W --turns 4     # --all is workloads' option, in a comment\n"
           "    ptxbench bench --models M --workloads W [--turns 8]\n"
           "        [--trials 3] [--no-report]\n"
           "then `ptxbench eval W F --trial 2` and `ptxbench repairs list --json`,\n"
           "`python3 -m ptxbench.agent seal R --undo`; `eval`'s own line: `ptxbench profile W F [--json]\n"
           "[--verdict-only] [--trials N]` and `ptxbench cache`,\n"
           "then prose that names --resume\n\n`ptxbench seal RUN` then prose: --json")
    assert misnamed_options(doc, options) == [
        "line 2: bench --trials", "line 4: eval --trial", "line 5: profile --trials"]


def env_mismatch(code: str, docs: str) -> tuple[list[str], list[str]]:
    """($PTXBENCH_* the code reads that no doc names, those a doc names that no code reads)."""
    import re

    def names(text):
        return set(re.findall(r"\bPTXBENCH_[A-Z][A-Z0-9_]*[A-Z0-9]\b", text))

    return sorted(names(code) - names(docs)), sorted(names(docs) - names(code))


def test_every_ptxbench_environment_variable_is_documented_and_real():
    """PTXBENCH_NCU and PTXBENCH_COMPUTE_SANITIZER were named only by the error that asks for them."""
    code = "\n".join(p.read_text() for top in ("agent", "tools", "workloads", "prompts", "bench")
                     for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".sh"))
    assert env_mismatch(code, "\n".join(d.read_text() for d in DOCS)) == ([], [])


def test_an_undocumented_or_stale_variable_is_caught():
    code = 'os.environ.get("PTXBENCH_NCU") or os.environ["PTXBENCH_CACHE"]'
    assert env_mismatch(code, "`$PTXBENCH_CACHE` (default ...), `PTXBENCH_NCU_LOCK=shared`") == (
        ["PTXBENCH_NCU"], ["PTXBENCH_NCU_LOCK"])


def unindexed(index: str, entries: list[str]) -> list[str]:
    """The entries (file or folder names) an index's table rows do not name in their first column."""
    named = {line.split("|")[1].strip().strip("`").rstrip("/") for line in index.splitlines() if line.startswith("| ")}
    return [e for e in entries if e not in named]


def test_the_docs_index_names_every_document():
    """docs/README.md left timing-integrity.md out."""
    entries = sorted(p.name for p in (ROOT / "docs").iterdir() if p.name != "README.md" and not p.name.startswith("."))
    assert unindexed((ROOT / "docs" / "README.md").read_text(), entries) == []


def test_an_unindexed_document_is_caught():
    index = ("| document | what it is |\n| --- | --- |\n"
             "| agent.md | the loop, timing-integrity.md aside |\n| examples/ | runs |\n")
    assert unindexed(index, ["agent.md", "examples", "timing-integrity.md"]) == ["timing-integrity.md"]


def missing_paths(text: str, folder: Path) -> list[str]:
    """The files a doc names that are nowhere: a path (`a/b.py`) from the repository root, the doc's folder, a code
    folder or tests/data; a bare `NAME.md` anywhere in the repository. Placeholders (`D/NN.json`, `<run>/`) aside."""
    import re

    out = []
    for ref in re.findall(r"(?<![\w/.<>*$-])((?:[\w.-]+/)+[\w.-]+\.(?:md|py|sh|toml))(?![\w/]|\.\w)", text):
        if any(part.isupper() for part in ref.split("/")[:-1]):
            continue
        bases = [ROOT, folder, *(ROOT / top for top in ("agent", "tools", "workloads", "prompts", "bench", "tests")),
                 ROOT / "tests" / "data"]
        if not any((b / ref).exists() for b in bases):
            out.append(ref)
    known = {p.name for p in ROOT.rglob("*.md")} | REPORT_FILES
    out += [name for name in re.findall(r"(?<![\w/.-])([\w-]+\.md)\b", text) if name not in known]
    return out


REPORT_FILES = {"repair.md"}  # written by `ptxbench report`, named where the docs say what a report holds


def test_every_file_a_doc_names_exists():
    """tools/README.md sent readers to FACTS.md, a file no checkout holds."""
    wrong = {str(d.relative_to(ROOT)): found for d in DOCS if (found := missing_paths(d.read_text(), d.parent))}
    assert wrong == {}


def test_a_missing_file_is_caught():
    text = ("the driver (see FACTS.md); tools/gpu/pool.py and gpu/pool.py, `ncu/capture.py`, D/NN_label.json,\n"
            "bench/results/gemm_sweep.md and bench/results/gemm_swept.md, bench/results/gemm_sweep/r14_x.py.txt")
    assert missing_paths(text, ROOT / "tools") == ["bench/results/gemm_swept.md", "FACTS.md"]


def split_tables(text: str) -> list[int]:
    """Lines where a table goes on after a blank line (Markdown ends the table at the blank, and the rows after it,
    with no header and separator of their own, show as plain text), and rows cut by a line break (no closing `|`)."""
    import re

    lines = text.splitlines()
    after_blank = [i + 1 for i in range(2, len(lines)) if lines[i].startswith("|") and not lines[i - 1].strip()
                   and lines[i - 2].startswith("|")
                   and not re.match(r"\|[\s:|-]+\|\s*$", lines[min(i + 1, len(lines) - 1)])]
    cut = [i + 1 for i, line in enumerate(lines) if line.startswith("|") and not line.rstrip().endswith("|")]
    return sorted(after_blank + cut)


def test_no_table_is_split_by_a_blank_line():
    """tools/README.md's compile table lost its jail.py, jail_deps.py, textcap.py and visible.py rows that way."""
    assert {str(d.relative_to(ROOT)): found for d in DOCS if (found := split_tables(d.read_text()))} == {}


def test_a_split_table_is_caught():
    table = ("| module | what |\n| --- | --- |\n| `a.py` | a |\n\n| `b.py` | b |\n"
             "\n| new | table |\n|---|---|\n| c | d, and\nmore |\n")
    assert split_tables(table) == [5, 9]


def stale_defaults(readme: str, sources: dict[str, str]) -> list[str]:
    """`SCRIPT --opt`: a `[--opt N]` a usage cell of bench/README.md shows that is not the script's argparse default."""
    import re

    out = []
    for script, usage in re.findall(r"`(\w+\.py)([^`]*)`", readme):
        for opt, shown in re.findall(r"\[(--[a-z][\w-]*) (\d+(?:\.\d+)?)\]", usage):
            found = re.search(re.escape(f'"{opt}"') + r"[^)]*?default=([\d.]+)\b", sources.get(script, ""))
            if not found or float(found.group(1)) != float(shown):
                out.append(f"{script} {opt}")
    return out


def test_the_bench_scripts_defaults_are_the_ones_their_usage_shows():
    """jail_overhead.py [--repeats 7] ran 5 repeats; attention_sweep.py [--trials 3] ran 1."""
    sources = {p.name: p.read_text() for p in (ROOT / "bench").glob("*.py")}
    assert stale_defaults((ROOT / "bench" / "README.md").read_text(), sources) == []


def test_a_stale_default_is_caught():
    source = 'ap.add_argument("--repeats", type=int, default=5)\nap.add_argument("--json", default=None)'
    readme = "| `jail_overhead.py [--repeats 7] [--json F]` | ... |\n| `jail_overhead.py [--repeats 5.0]` |"
    assert stale_defaults(readme, {"jail_overhead.py": source}) == ["jail_overhead.py --repeats"]


def undefined_types(text: str, modules: list) -> list[str]:
    """The CamelCase names a doc puts in backticks that none of the modules defines (Python's own aside)."""
    import builtins
    import re

    names = sorted(set(re.findall(r"`([A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+|[A-Z][a-z]+)`", text)))
    return [n for n in names if not hasattr(builtins, n) and not any(hasattr(m, n) for m in modules)]


def test_the_solution_format_names_the_types_the_parser_has():
    """extract_solution returns an ExtractedSource; the page said `Extracted`, which is agent/loop's reply type."""
    from ptxbench.tools.solution import expr, parse, plan

    assert undefined_types((ROOT / "docs" / "solution-format.md").read_text(), [parse, plan, expr]) == []


def test_an_undefined_type_is_caught():
    from ptxbench.tools.solution import parse

    assert undefined_types("`ExtractedSource` or `Extracted`, a `ValueError`; `None`", [parse]) == ["Extracted"]


def unlisted_bug_classes(text: str, classes: list[str], families: dict[str, tuple[str, ...]]) -> list[str]:
    """The bug classes a doc neither names nor covers by naming their family (`PIPELINE_CLASSES`)."""
    covered = {c for name, members in families.items() if f"`{name}" in text for c in members}
    return [c for c in classes if f"`{c}`" not in text and c not in covered]


def test_the_synthetic_repairs_section_covers_every_bug_class():
    """dataset-schema.md listed the first fifteen classes as if they were all: the pipeline and backward ones were
    missing."""
    from ptxbench.agent.export import mutations

    families = {n: getattr(mutations, n) for n in ("PIPELINE_CLASSES", "BACKWARD_CLASSES", "CLUSTER_CLASSES")}
    text = (ROOT / "docs" / "dataset-schema.md").read_text()
    assert unlisted_bug_classes(text, [m.name for m in mutations.MUTATIONS], families) == []


def test_an_unlisted_bug_class_is_caught():
    families = {"CLUSTER_CLASSES": ("cluster_a", "cluster_b")}
    classes = ["wrong_swizzle", "cluster_b", "bwd_dq_plain_store"]
    text = "`wrong_swizzle` and (`CLUSTER_CLASSES` in mutations.py)"
    assert unlisted_bug_classes(text, classes, families) == ["bwd_dq_plain_store"]


def test_the_run_layout_names_each_kernel_suffix():
    """docs/agent.md's run layout gave every turn's kernel as turn_NN.cu; a PTX solution is kept as turn_NN.ptx."""
    from ptxbench.agent.records.rundir import KERNEL_SUFFIX

    text = (ROOT / "docs" / "agent.md").read_text()
    layout = text[text.index("kernels/turn_NN"):].split("\n\n")[0]
    assert [s for s in KERNEL_SUFFIX.values() if f".{s}" not in layout] == []


def test_the_run_layout_names_every_event_and_stop_reason():
    """A log's model_retry events and the stop reasons (turn_limit, time_budget ...) were named in no doc."""
    import typing

    from ptxbench.agent.records import events

    text = (ROOT / "docs" / "agent.md").read_text()
    layout = text[text.index("trajectory.jsonl    "):text.index("kernels/turn_NN")]
    kinds = [c.model_fields["type"].default for c in vars(events).values()
             if isinstance(c, type) and issubclass(c, events._Event) and "type" in c.model_fields]
    reasons = typing.get_args(events.Stop.model_fields["reason"].annotation)
    assert [n for n in [*kinds, *reasons] if n not in layout] == []


def test_the_tool_budgets_the_agent_doc_gives_are_the_config_defaults():
    """docs/agent.md named the tools mode's two tool-call budgets without their values."""
    import re

    from ptxbench.agent.loop.state import OptimizeConfig

    text = (ROOT / "docs" / "agent.md").read_text()
    shown = re.search(r"`--max-tool-calls` \(trajectory, default (\d+)\) and `max_tool_calls_per_turn` \((\d+)\)",
                      " ".join(text.split()))
    assert shown, "docs/agent.md no longer gives the tool-call budgets"
    fields = OptimizeConfig.model_fields
    assert [int(shown[1]), int(shown[2])] == [fields[n].default for n in ("max_tool_calls", "max_tool_calls_per_turn")]


def unnamed_files(readme: str, names: list[str]) -> list[str]:
    return [n for n in names if f"`{n}`" not in readme]


def test_the_prompts_readme_names_every_prompt_text():
    """prompts/README.md's table left out start_from.md, the text a --start-from or repair-track trajectory opens with
    (test_folder_readmes.py checks modules only)."""
    texts = sorted(p.name for p in (ROOT / "prompts").glob("*.md") if p.name != "README.md")
    assert unnamed_files((ROOT / "prompts" / "README.md").read_text(), texts) == []


def test_an_unnamed_prompt_text_is_caught():
    assert unnamed_files("| `task.md` | the task |\n... start_from.md ...", ["task.md", "start_from.md"]) == [
        "start_from.md"]


def test_the_tests_readme_names_every_data_folder():
    """tests/README.md's tests/data table left out cheats/, prompt/ and repair_suite/."""
    text = (ROOT / "tests" / "README.md").read_text()
    table = text[text.index("## tests/data"):].split("\n\n")[1]
    assert unindexed(table, sorted(p.name for p in (ROOT / "tests" / "data").iterdir() if p.is_dir())) == []


def test_the_docs_say_builtin_reference_submits_the_wgmma_backward():
    """README.md and agent/models/README.md named only the forward's wgmma kernel; the backward gets its own too."""
    import re

    from ptxbench.agent.models.builtin import reference_source

    assert "wgmma.mma_async" in reference_source("smoke_mha_bwd_d64")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert re.search(r"`builtin/reference` submits[^;]*backwards? the wgmma", readme)
    models = " ".join((ROOT / "agent" / "models" / "README.md").read_text().split())
    assert "attention_backward.reference_backward" in models[models.index("`reference_source(workload_id)` picks"):]
    # workloads/solutions/README.md's picks went from fast_solution straight to the plain attention_solution
    solutions = " ".join((ROOT / "workloads" / "solutions" / "README.md").read_text().split())
    picks = solutions[solutions.index("pick a workload's reference with `reference_source`"):]
    assert "`attention_backward.reference_backward` (the wgmma backward), else `attention_solution`" in picks


def test_the_cli_readme_gives_profiles_own_no_gpu_line(monkeypatch, tmp_path):
    """agent/cli/README.md told every GPU command's user to pass --no-gpu, which profile does not take."""
    from ptxbench.agent.cli import preflight

    monkeypatch.setattr(preflight, "no_gpu_reason", lambda: "no NVIDIA driver")
    kernel = tmp_path / "k.cu"
    kernel.write_text("// nothing")
    result = CliRunner().invoke(app, ["profile", "smoke_gemm_bf16_m256_n256_k512", str(kernel)])
    assert result.exit_code == 2 and "--no-gpu" not in result.output
    assert f"`ptxbench compile {kernel} --workload smoke_gemm_bf16_m256_n256_k512`" in result.output
    text = " ".join((ROOT / "agent" / "cli" / "README.md").read_text().split())
    assert "profile, which has no --no-gpu, names `ptxbench compile FILE --workload W`" in text


def test_replay_of_a_run_without_the_workload_is_refused_as_its_readme_says():
    """agent/models/README.md said a run folder without the workload replays its first trajectory, which the first
    call refuses."""
    from ptxbench.agent.models.base import ModelError, ModelRequest
    from ptxbench.agent.models.replay import ReplayModel

    model = ReplayModel(ROOT / "docs" / "examples" / "optimize-gemm-tuner", "smoke_gemm_bf16_m256_n256_k512")
    with pytest.raises(ModelError, match="recorded workload gemm_bf16_m8192_n7168_k5120, not smoke"):
        model.query(ModelRequest(messages=[{"role": "user", "content": "x"}], turn=1, call_index=0))
    assert "else the first, which the first call then refuses as another workload's" in (
        ROOT / "agent" / "models" / "README.md").read_text()


# ---- docs/solution-format.md and its neighbours state what the harness does ---------------------------------------

def _doc(name: str) -> str:
    return " ".join((ROOT / "docs" / name).read_text().split())


_POLICY_DOC = _doc("solution-format.md").split("## Source policy", 1)[1].split("After the compile", 1)[0]
# a source the policy must refuse (tests/policy_refusals.py) -> the spelling the page names it by
_POLICY_REFUSALS = [(REFUSED[key], named) for key, named in [
    ("std", "`std::uint32_t` is refused"), ("new", "`new` / `delete`"), ("error", "`#error`"), ("warning", "`#warning`"),
    ("line", "`#line`"), ("line_marker", '`# N "file"` line markers'),
    ("pragma", "`#pragma` other than `unroll`, `nounroll`, `once`"),
    ("_pragma", "`_Pragma` other than with a string literal"), ("has_include", "`__has_include`"),
    ("include_next", "`#include_next`"), ("non_ascii", "not ASCII"), ("ucn", "`\\u` universal character name"),
    ("carriage_return", "a lone carriage return"), ("nul", "a NUL")]]


@pytest.mark.parametrize("source,named", _POLICY_REFUSALS, ids=[n for _, n in _POLICY_REFUSALS])
def test_each_refusal_the_source_policy_makes_is_named_on_the_page(source, named):
    """docs/solution-format.md named `std::` and `#pragma` but not the directive allow list (`#error`, `#line`...),
    `_Pragma`, `__has_include` or the characters the policy refuses."""
    from ptxbench.tools.solution.cuda_policy import check_cuda_source

    assert check_cuda_source(source), source
    assert named in _POLICY_DOC, named


def test_the_pages_allow_lists_are_the_policys():
    """The directives, pragmas and headers the page allows, each list as the policy holds it."""
    from ptxbench.tools.solution.cuda_policy import ALLOWED_DIRECTIVES, ALLOWED_INCLUDES, ALLOWED_PRAGMAS, \
        check_cuda_source

    directives = _POLICY_DOC.split("every directive outside the allow list", 1)[1].split("(so", 1)[0]
    assert re.findall(r"`#(\w+)`", directives) == list(ALLOWED_DIRECTIVES), directives
    assert f"`#pragma` other than {', '.join(f'`{p}`' for p in ALLOWED_PRAGMAS)}" in _POLICY_DOC
    includes = _POLICY_DOC.split("`#include` of anything but", 1)[1].split("(also", 1)[0]
    assert re.findall(r"`([<\"][^`]+[>\"])`", includes) == list(ALLOWED_INCLUDES), includes
    allowed = "".join(f"#include {h}\n" for h in ALLOWED_INCLUDES) + "#define N 4\n#undef N\n#pragma once\n" \
        + DEVICE.format('uint32_t x = 0;\n#pragma unroll\nfor (int i = 0; i < 4; ++i) x += i;\n_Pragma("nounroll") '
                         "for (int i = 0; i < 4; ++i) x += i; (void)x;")
    assert check_cuda_source(allowed) == []


def _max_clusters_plan(where: str) -> str:
    at = {"grid": "max_clusters * 2", "smem": "max_clusters", "args": "max_clusters", "cluster": "max_clusters // 66",
          "box": "max_clusters // 2", "shape": "max_clusters"}
    grid = f'"{at["grid"]}"' if where == "grid" else "132"
    cluster = f'"{at["cluster"]}"' if where == "cluster" else "2"
    smem = f'"{at["smem"]}"' if where == "smem" else "0"
    arg = at["args"] if where == "args" else "1"
    box = f'"{at["box"]}"' if where == "box" else "64"
    shape = f'"{at["shape"]}"' if where == "shape" else "4"
    return ('/* ptxbench\nlanguage = "cuda"\n[[launch]]\nkernel = "k"\n'
            f'grid = [{grid}, 1, 1]\nblock = [128, 1, 1]\ncluster = [{cluster}, 1, 1]\nsmem = {smem}\n'
            f'args = ["tmap:a", "scratch:w", "i32:{arg}"]\n[tmap.a]\ntensor = "A"\nbox = [{box}, 128]\n'
            f'[scratch.w]\ndtype = "int32"\nshape = [{shape}]\n*/\n'
            '#include <cuda.h>\nextern "C" __global__ void k(const __grid_constant__ CUtensorMap a, int* w, int n) {}\n')


@pytest.mark.parametrize("where,known", [("grid", True), ("smem", True), ("args", True), ("cluster", False),
                                         ("box", False), ("shape", False)])
def test_max_clusters_is_known_where_the_page_says_and_nowhere_else(where, known):
    """The page gave `max_clusters` per launch without saying where it is a name: in a launch's own `cluster`, a
    `[tmap]` or a `[scratch]` table it is an unknown name, a PLAN_ERROR."""
    from ptxbench.tools.solution.parse import parse_solution
    from ptxbench.tools.solution.plan import Solution
    from ptxbench.workloads.registry import get_workload

    got = parse_solution(_max_clusters_plan(where), get_workload("gemm_bf16_m8192_n7168_k5120"), "sm_90a")
    if known:
        assert isinstance(got, Solution), [str(i) for i in got]
    else:
        assert isinstance(got, list) and any("unknown name 'max_clusters'" in i.message and i.kind == "plan"
                                             for i in got), got
    assert ("it exists in a `[[launch]]` table's `grid`, `block`, `smem` and `args` only, so in the launch's own "
            "`cluster`, a `[tmap]` or a `[scratch]` table it is an unknown name, a `PLAN_ERROR`") in _doc("solution-format.md")


def test_the_zero_fill_is_timed_and_other_scratch_is_refilled_outside_the_interval():
    """The page said `zero = true` scratch is "zero-filled before every run" and other scratch "filled with garbage":
    the fill runs in CandidateCalls.call, which time_sides puts between its CUDA events; other scratch gets fresh
    random bytes in the preparation, before the start event."""
    import inspect

    from ptxbench.tools.gpu.buffers import allocate_set
    from ptxbench.tools.gpu.calls import CandidateCalls, InputSet
    from ptxbench.tools.gpu.timing import time_sides

    assert re.search(r"side\.prepare\(\).*start\.record\(\)\s*out = side\.call\(\)\s*end\.record\(\)",
                     inspect.getsource(time_sides), re.S)
    bufs = allocate_set([("C", (4, 4), "bfloat16", "output")],
                        [("acc", [8], "float32", True), ("tmp", [64], "int32", False)], device="cpu")
    seen = {}

    class Candidate:
        def bind(self, b):
            return b

        def launch(self, b):
            seen.update({n: g.data.clone() for n, g in b.scratch.items()})

    calls = CandidateCalls(Candidate(), [InputSet(0, 0, bufs, {})], key=1)
    bufs.scratch["acc"].data.fill_(7.0)
    bufs.scratch["tmp"].data.zero_()
    calls.current = 0
    calls.call()  # the timed interval: the fill, then the launches
    assert not seen["acc"].any() and not seen["tmp"].any(), seen  # no refill of the other scratch in there
    bufs.reset()  # the preparation, outside the interval
    assert bufs.scratch["tmp"].data.any()  # fresh random bytes
    page = _doc("solution-format.md")
    assert ("| | `zero` | `true`: zero-filled at the start of every call, inside the timed interval; `false` (default): "
            "fresh random bytes before every call, outside it |") in page
    assert "a call's time is that fill plus every launch of the plan" in page


def test_a_token_use_is_not_credited_as_the_docs_say():
    """timing-integrity.md named only the decoy half of the token rule, and dataset-schema.md's `target_executed`
    did not say a token use reads false."""
    from ptxbench.tools.profile.verdict import TOKEN_SHARE
    from ptxbench.tools.results import EvalResult, RuntimeTarget

    assert TOKEN_SHARE == 0.5
    token = EvalResult(workload="w", status="PASSED", targets_runtime={
        "wgmma": RuntimeTarget(verdict="token", reason=""), "tma": RuntimeTarget(verdict="executed", reason="")})
    assert token.target_executed is False
    assert "a family whose own work counter holds under half the workload's work" in _doc("timing-integrity.md")
    assert "a `token` use: under half the workload's work, or the same work also done another way" in \
        _doc("dataset-schema.md")


def test_the_calibrated_rule_is_stated_with_the_workloads_factor():
    from ptxbench.workloads.registry import list_workloads

    assert {w.tolerance.library_factor for w in list_workloads()} == {2.0}
    assert ("where the library itself misses, or nearly misses, the element rule on an input set, an output passes "
            "within 2x its max abs and relative Frobenius errors") in _doc("timing-integrity.md")


def test_the_ptx_target_and_the_compilers_follow_the_tasks_architecture():
    """The page says `.target`, `ptxas -arch=` and nvcc's `compute_` target follow `arch`, as the format tells the
    model (a task for sm_100a was told `.target sm_90a`)."""
    from ptxbench.tools.compile import nvcc_flags, ptxas_flags
    from ptxbench.tools.solution.cuda_policy import check_ptx_source
    from ptxbench.workloads.arch import ARCHS

    for arch in ARCHS:
        module = f".version 8.0\n.target {arch}\n.address_size 64\n"
        assert check_ptx_source(module, arch) == []
        assert all(check_ptx_source(module, other) for other in ARCHS if other != arch)
        assert f"-arch={arch}" in ptxas_flags(arch)
        assert f"-gencode=arch={arch.replace('sm_', 'compute_')},code={arch}" in nvcc_flags(arch)
    assert ("`.target`, `ptxas -arch=` and nvcc's `compute_` target all follow `arch`" in _doc("solution-format.md"))


def ablation_parts_mismatch(readme: str, source: str) -> tuple[list[str], list[str]]:
    """(parts bench/ablate/README.md names that sitecustomize.py does not handle, parts it handles that the README
    does not name)."""
    named = set(re.findall(r"`([a-z_]+)`", readme))
    handled = set(re.findall(r'"([a-z_]+)" in _parts', source))
    return sorted(named - handled), sorted(handled - named)


def test_the_ablation_readme_names_the_parts_sitecustomize_handles():
    """bench/ablate/README.md named a `blas_handback` part removed from sitecustomize.py, and not `plain_heads`."""
    folder = ROOT / "bench" / "ablate"
    assert ablation_parts_mismatch((folder / "README.md").read_text(),
                                   (folder / "sitecustomize.py").read_text()) == ([], [])


def test_a_stale_ablation_part_is_caught():
    source = 'if "scrub" in _parts:\n    pass\nif "plain_heads" in _parts:\n    pass\n'
    assert ablation_parts_mismatch("names parts (`scrub`, `blas_handback`)", source) == (
        ["blas_handback"], ["plain_heads"])


def cross_checks_misnamed(text: str, families: list) -> list[str]:
    """The `OPCODES <-> `counter`` pairs a doc gives that no target family's `counter_opcodes` holds as written."""
    pairs = {counter: set(opcodes) for fam in families for counter, opcodes in fam.counter_opcodes.items()}
    return [f"{ops} <-> {counter}" for ops, counter in re.findall(r"([A-Z][A-Z0-9 /]*[A-Z0-9]) <-> `([\w.]+)`", text)
            if pairs.get(counter) != {o.strip() for o in ops.split("/")}]


def test_the_verdicts_cross_checks_are_the_arch_profiles():
    """tools/README.md paired UTMALDG with op_tma_ld, a counter the TMA family reads but never cross-checks: its
    cross-check is every TMA opcode against op_tma."""
    from ptxbench.workloads.arch import ARCHS

    families = [fam for arch in ARCHS.values() for fam in arch.families]
    assert cross_checks_misnamed((ROOT / "tools" / "README.md").read_text(), families) == []


def test_a_misnamed_cross_check_is_caught():
    from ptxbench.workloads.arch import SM90A

    text = ("(HGMMA <-> `sm__inst_executed_pipe_tensor_op_gmma.sum`, "
            "UTMALDG <-> `smsp__sass_inst_executed_op_tma_ld.sum`)")
    assert cross_checks_misnamed(text, SM90A.families) == ["UTMALDG <-> smsp__sass_inst_executed_op_tma_ld.sum"]


def test_an_export_writes_a_split_file_only_for_a_split_with_rows(tmp_path):
    """dataset-schema.md said an export writes train.<fmt>; one whose rows all go to the test split writes none."""
    run = ROOT / "docs" / "examples" / "optimize-gemm-tuner"
    result = CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--out", str(tmp_path / "out"),
                                      "--format", "jsonl", "--test-workloads", "gemm_bf16_m8192_n7168_k5120"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["export_manifest.json", "test.jsonl"]
    assert ("each only when its split holds a row (an export whose rows all went to test, or that made none, writes no "
            "`train.<fmt>`)") in _doc("dataset-schema.md")


def out_defaults_unstated(readme: str, scripts: dict[str, str]) -> list[str]:
    """The bench shell scripts that write to $OUT with no default of their own, or with one bench/README.md does not
    state: `./NAME` beside the script's name, or `./bench_out`, the default of the others."""
    out = []
    for name, text in scripts.items():
        code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        if not re.search(r"\$\{?OUT\b", code):
            continue
        found = re.search(r"\$\{OUT:-\$PWD/(\w+)\}", code)
        if not found or (found[1] != "bench_out" and f"`./{found[1]}` ({name})" not in readme):
            out.append(name)
    return out


def test_each_bench_script_writes_to_the_out_folder_its_readme_states():
    """bench/README.md gave ./gpu_check_out or ./bench_out as $OUT's default: gpu_round.sh and throughput_ab.sh have
    folders of their own, and ref_eval_machine.sh (with eval_power_probe.sh) and gemm_diag_round.sh had none, writing
    their files into / or stopping on an unset variable."""
    readme = " ".join((ROOT / "bench" / "README.md").read_text().split())
    scripts = {p.name: p.read_text() for p in (ROOT / "bench").glob("*.sh")}
    assert out_defaults_unstated(readme, scripts) == []


def test_an_unstated_out_default_is_caught():
    scripts = {"a.sh": 'OUT=${OUT:-$PWD/bench_out}\ntar czf $OUT/a.tgz x', "b.sh": "cd $OUT && ls",
               "c.sh": 'OUT=${OUT:-$PWD/c_out}; echo > "$OUT/x"', "d.sh": "# writes $OUT/d\nexec bash a.sh",
               "e.sh": 'OUT=${OUT:-$PWD/e_out}; echo > "$OUT/x"'}
    assert out_defaults_unstated("write to `$OUT` (default `./e_out` (e.sh), else `./bench_out`)", scripts) == [
        "b.sh", "c.sh"]


def test_the_repair_readme_says_a_repair_run_takes_its_suites_flush(tmp_path):
    """workloads/repairs/README.md told users to put `l2_flush = "write"` in the bench's optimize table to compare
    speeds with the committed suite; a repair run has taken the suite's own flush by itself since 219579ed."""
    from ptxbench.agent.bench.matrix import BenchConfig
    from ptxbench.agent.bench.runner import open_run

    config = BenchConfig(models=["builtin/unchanged"], workloads=[], trajectories=1, turns=1, track="repair")
    assert open_run(config, tmp_path / "run", False).optimize["l2_flush"] == "write"  # the committed suite's
    text = " ".join((ROOT / "workloads" / "repairs" / "README.md").read_text().split())
    assert "a new repair run is timed from the suite's own flush unless the bench's `optimize` table names one" in text


def test_the_plain_attention_solution_refuses_only_the_gqa_backward():
    """workloads/solutions/README.md said attention_solution raised KeyError for a causal GQA forward too; that
    forward takes the causal and the group edit both."""
    from ptxbench.workloads.registry import list_workloads
    from ptxbench.workloads.solutions.attention import attention_solution

    refused = []
    for workload in list_workloads():
        if workload.op != "gemm":
            try:
                attention_solution(workload)
            except KeyError:
                refused.append(workload)
    assert refused and all(w.op == "mha_bwd" and "HKV" in w.symbols for w in refused)
    text = " ".join((ROOT / "workloads" / "solutions" / "README.md").read_text().split())
    assert "KeyError for a GQA backward; a causal GQA forward takes both plan edits" in text


def test_a_bound_that_is_no_size_is_refused_by_the_cache_command_as_its_readme_says(tmp_path, monkeypatch):
    """tools/README.md said a bound that is no size warns and the default applies; `ptxbench cache`, which prints the
    bound, refuses it instead."""
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PTXBENCH_CACHE_MAX_BYTES", "bogus")
    result = CliRunner().invoke(app, ["cache"])
    assert result.exit_code == 2 and "is not a size" in result.output, result.output
    text = " ".join((ROOT / "tools" / "README.md").read_text().split())
    assert "warns once on stderr and the default applies; `ptxbench cache` refuses it, exit status 2" in text


def test_the_gpu_readme_quotes_a_remembered_hang_as_the_model_hears_it():
    """tools/gpu/README.md quoted "the same binary timed out at turn N"; the memo serves every trajectory of an
    evaluator, so its answer names no turn (f691739c)."""
    from types import SimpleNamespace

    from ptxbench.tools.gpu.hangs import reused_message

    said = reused_message(SimpleNamespace(outcome=SimpleNamespace(message="MESSAGE")))
    row = next(line for line in (ROOT / "tools" / "gpu" / "README.md").read_text().splitlines()
               if line.startswith("| `hangs.py`"))
    quoted = re.search(r'\("([^"]+)"', row)[1]
    assert quoted.replace("<its TIMEOUT message>", "MESSAGE") == said, (quoted, said)


def test_the_tests_readme_names_every_shared_fixture():
    """tests/README.md's conftest.py row named data_dir but not workdir, the working folder the CLI tests share."""
    fixtures = re.findall(r"@pytest\.fixture[^\n]*\ndef (\w+)", (ROOT / "tests" / "conftest.py").read_text())
    row = next(line for line in (ROOT / "tests" / "README.md").read_text().splitlines()
               if line.startswith("| `conftest.py`"))
    assert fixtures and [f for f in fixtures if f"`{f}`" not in row] == []
