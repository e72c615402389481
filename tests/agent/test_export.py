"""Export recipes on a hand-built run: the right rows, filters, balance, dedup, split, provenance, loadable files."""
from __future__ import annotations

import json

import pytest

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.normalize import kernel_hash
from ptxbench.agent.export.writer import write_dataset

from export_runs import SYSTEM, build_run


@pytest.fixture
def run(tmp_path):
    return build_run(tmp_path)


def test_kernelgen_keeps_passed_target_executed_turns_deduplicated(run):
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="kernelgen"))
    # t1 turns 2 and 3 (passed, executed); t2's pass did not execute wgmma; t3 repeats t1's turn 2; t4 is held out.
    assert sorted((r.provenance.trajectory, r.provenance.turn) for r in rows) == [("t1", 2), ("t1", 3)]
    assert stats["duplicates_dropped"] == 1 and stats["held_out_trajectories_skipped"] == 1
    row = rows[0]
    assert [m.role for m in row.messages] == ["system", "user", "assistant"]
    assert row.messages[0].content == SYSTEM and row.loss_mask == [0, 0, 1]
    assert row.completion[0].content.startswith("```cuda\n/* ptxbench")
    assert row.provenance.gpu == "NVIDIA H200" and len(row.provenance.kernel_sha256) == 64


def test_fixit_rows_carry_the_real_feedback_and_train_on_the_last_message(run):
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert len(rows) == 1
    row = rows[0]
    assert row.failure_class == "COMPILE_ERROR"
    assert [m.role for m in row.prompt] == ["system", "user", "assistant", "user"]
    assert row.prompt[3].content == "line 3: ptxas error: unknown symbol"
    assert "variant_a" in row.prompt[2].content and "variant_b" in row.completion[0].content
    assert row.loss_mask == [0, 0, 0, 0, 1] and row.messages[:4] == row.prompt
    assert row.provenance.source_turn == 1 and row.provenance.turn == 2
    assert row.provenance.feedback_sha256 is not None


def test_filters_target_speedup_first_k_and_held_out(run):
    samples = collect_samples([run])
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit", require_target_executed=False))
    assert sorted(r.workload for r in rows) == ["gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128"]
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen", min_speedup=0.9))
    assert [r.provenance.turn for r in rows] == [3]
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen", first_k_turns=2))
    assert [r.provenance.turn for r in rows] == [2]
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit", include_held_out=True))
    assert sorted(r.workload for r in rows) == ["gemm_bf16_m8192_n7168_k5120", "mha_fwd_d64"]
    assert next(r for r in rows if r.workload == "mha_fwd_d64").held_out


def test_balance_keeps_the_fastest_and_split_is_by_workload(run):
    samples = collect_samples([run])
    rows, stats = build_rows(samples, ExportConfig(recipe="kernelgen", max_per_group=1, dedup=False))
    gemm = [r for r in rows if r.workload.startswith("gemm")]
    assert len(gemm) == 1 and gemm[0].speedup == 0.95 and stats["balance_dropped"] == 2
    rows, _ = build_rows(samples, ExportConfig(recipe="fixit", require_target_executed=False,
                                               test_workloads=["mha_fwd_d128"]))
    assert {(r.workload, r.split) for r in rows} == {("gemm_bf16_m8192_n7168_k5120", "train"), ("mha_fwd_d128", "test")}


def test_token_cap_and_a_named_tokenizer(run, tmp_path):
    from tiny_lm import build_tokenizer

    samples = collect_samples([run])
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen"))
    longest = max(r.n_tokens for r in rows)
    capped, stats = build_rows(samples, ExportConfig(recipe="kernelgen", max_tokens=longest - 1))
    assert len(capped) < len(rows) and stats["over_token_cap_dropped"] >= 1
    tok = build_tokenizer(tmp_path / "tok", [r.messages[-1].content for r in rows] * 4)
    spec = f"hf:{tmp_path / 'tok'}"
    hf, _ = build_rows(samples, ExportConfig(recipe="kernelgen", tokenizer=spec))
    expected = sum(len(tok(m.content, add_special_tokens=False)["input_ids"]) + 4 for m in hf[0].messages)
    assert hf[0].n_tokens == expected and hf[0].tokenizer == spec


def _offline_tiktoken(monkeypatch, tmp_path, name):
    """tiktoken with an empty download cache and no network: every fetch of an encoding file fails as offline."""
    tiktoken = pytest.importorskip("tiktoken")
    import tiktoken.load
    import tiktoken.registry

    from ptxbench.agent.export.tokens import counter

    def no_network(url):
        raise ConnectionError(f"Max retries exceeded with url: {url} (Caused by NameResolutionError)")

    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr("requests.get", lambda url, **kw: no_network(url))  # prompts/encodings.py's bounded download
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, name, raising=False)
    counter.cache_clear()
    return counter


def test_a_tiktoken_encoding_loads_offline_from_litellms_bundled_copy(monkeypatch, tmp_path):
    """prompts/size.py counted o200k_base offline from litellm's copy, but `export --tokenizer tiktoken:o200k_base`
    failed there with a truncated connection error."""
    pytest.importorskip("litellm")
    counter = _offline_tiktoken(monkeypatch, tmp_path, "o200k_base")
    try:
        assert counter("tiktoken:o200k_base")("hello world") == 2
    finally:
        counter.cache_clear()


def test_a_tokenizer_that_cannot_load_offline_says_what_to_do(monkeypatch, tmp_path):
    from contextlib import nullcontext

    from ptxbench.agent.export.tokens import TokenizerUnavailable

    counter = _offline_tiktoken(monkeypatch, tmp_path, "cl100k_base")
    monkeypatch.setattr("ptxbench.prompts.encodings.bundled_cache", nullcontext)  # no bundled copy either
    try:
        with pytest.raises(TokenizerUnavailable, match="offline, a tokenizer loads only from a local copy .*"
                                                       "--tokenizer estimate"):
            counter("tiktoken:cl100k_base")
    finally:
        counter.cache_clear()


def test_normalised_hash_ignores_comments_but_not_the_plan():
    a = "/* ptxbench\ngrid = [\"M // 128\"]\n*/\n// hello\nint x;  /* note */\n"
    b = "/* ptxbench\ngrid = [\"M // 128\"]\n*/\nint   x;\n"
    c = "/* ptxbench\ngrid = [\"M // 64\"]\n*/\nint x;\n"
    assert kernel_hash(a) == kernel_hash(b) != kernel_hash(c)


def test_normalised_hash_ignores_white_space_between_tokens_but_not_inside_one():
    """White space was collapsed, not removed: `x = a + b` and `x=a+b` (a reformatted copy of one kernel) were two
    kernels, so dedup kept both and a test kernel's reformatted copy stayed in train. Space that parts two tokens
    still counts: `- -b` is not `--b`, `a & &b` not `a && b`, `int x` not `intx`."""
    head = "/* ptxbench\nlanguage = \"cuda\"\n*/\n"
    a = head + "__global__ void k(float* C, int n) {\n  int x = a + b * (n - 1);\n  C[x] = -1.0f;\n}\n"
    b = head + "__global__ void k(float *C,int n){int x=a+b*(n-1);\n\tC[ x ]=-1.0f;}"
    assert kernel_hash(a) == kernel_hash(b)
    assert kernel_hash(head + "y = - -b;") != kernel_hash(head + "y = --b;")
    assert kernel_hash(head + "y = a & &b;") != kernel_hash(head + "y = a && b;")
    assert kernel_hash(head + "int x;") != kernel_hash(head + "intx;")
    assert kernel_hash(head + "y = x >>= 1;") != kernel_hash(head + "y = x > >= 1;")
    asm = head + 'asm volatile("mov.u32 %0, 1;" : "=r"(x));'
    assert kernel_hash(asm) == kernel_hash(asm.replace(" : ", ":")) != kernel_hash(asm.replace("mov.u32 %0", "mov.u32%0"))


def test_normalised_hash_keeps_code_after_a_comment_opener_inside_a_comment_or_a_string():
    """Block comments stripped before line comments: a "/*" inside a // comment swallowed the code up to the next
    "*/", and a "//" inside a string (an inline-asm comment) cut its line, so different kernels were duplicates."""
    head = "/* ptxbench\nlanguage = \"cuda\"\n*/\n"
    a = head + "void k(float* C) {\n  // tile loop, see /* notes\n  C[0] = 1.0f;\n  /* done */\n}\n"
    assert kernel_hash(a) != kernel_hash(a.replace("1.0f", "2.0f"))
    assert kernel_hash(a) == kernel_hash(a.replace("see /* notes", "see notes"))
    b = head + 'void f() { asm volatile("mov.u32 %0, 1; // x" : "=r"(x)); y = 1; }\n'
    assert kernel_hash(b) != kernel_hash(b.replace("y = 1", "y = 2"))
    assert kernel_hash(b + "// a '\"' quote\n") == kernel_hash(b)


def test_normalised_hash_is_linear_in_a_kernel_of_unclosed_comments():
    """Each unclosed "/*" scanned to the end of the text for its "*/": a 400 KB failing kernel of them took minutes a
    hash, and a Fixit export hashes each pair three times. An unclosed comment runs to the end, as the compilers read it."""
    from waits import cpu_timed

    _, took = cpu_timed(kernel_hash, "/* " * 130_000)
    assert took < 2, took
    assert kernel_hash("int x; /* a") == kernel_hash("int x; /* b") != kernel_hash("int y; /* a")


@pytest.mark.parametrize("line", ['\\"' * 130_000, "\\'" * 130_000])
def test_normalised_hash_is_linear_in_a_line_of_unclosed_quotes(line):
    """Each unclosed quote was searched for its close to the end of its line, again from every opener: a 390 KB line
    of escaped quotes took minutes a hash. An unclosed quote runs to the end of its line; a digit separator opens
    none, so a comment after one still does not count."""
    from waits import cpu_timed

    _, took = cpu_timed(kernel_hash, line)
    assert took < 2, took
    assert kernel_hash('int x = "a; // b\n') != kernel_hash('int x = "a; // c\n')  # inside the unclosed literal
    assert kernel_hash("int x = 1'000; // count\n") == kernel_hash("int x = 1'000;\n")
    assert kernel_hash("char c = 'a'; // x\n") == kernel_hash("char c = 'a';\n") != kernel_hash("char c = 'b';\n")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_written_files_load_with_datasets(run, tmp_path, fmt):
    import datasets

    cfg = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), cfg)
    paths = write_dataset(rows, tmp_path / "out", fmt, cfg, stats, [str(run)])
    kind = "json" if fmt == "jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files={k: str(v) for k, v in paths.items()})
    assert ds["train"].num_rows == 1 and ds["test"].num_rows == 1
    assert ds["train"][0]["completion"][0]["role"] == "assistant"
    manifest = json.loads((tmp_path / "out" / "export_manifest.json").read_text())
    assert manifest["stats"]["rows"] == 2


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_no_host_path_reaches_the_dataset_folder(run, tmp_path, fmt):
    """export_manifest.json's runs were the paths as given, and an hf:<folder> tokenizer stood in it and in every row
    as typed: a published dataset told the exporting host's username and folders. Runs are named as provenance.run
    names them; a local tokenizer folder by its name, a hub name as it is."""
    spec = f"hf:{tmp_path / 'models' / 'tok'}"  # a folder: an absolute path, here or on the host that made the rows
    cfg = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), cfg)
    rows = [r.model_copy(update={"tokenizer": spec}) for r in rows]
    out = tmp_path / "out"
    paths = write_dataset(rows, out, fmt, cfg.model_copy(update={"tokenizer": spec}), stats, [str(run)])
    manifest = json.loads((out / "export_manifest.json").read_text())
    assert manifest["runs"] == [run.name] and manifest["config"]["tokenizer"] == "hf:tok"
    assert str(tmp_path) not in json.dumps(manifest)
    if fmt == "jsonl":
        written = [json.loads(line) for p in paths.values() for line in p.read_text().splitlines()]
    else:
        import pyarrow.parquet as pq

        written = [r for p in paths.values() for r in pq.read_table(p).to_pylist()]
    assert written and {r["tokenizer"] for r in written} == {"hf:tok"}
    assert str(tmp_path) not in json.dumps(written, default=str)
    from ptxbench.agent.export.host_paths import tokenizer_name

    assert tokenizer_name("hf:Qwen/Qwen3-8B") == "hf:Qwen/Qwen3-8B" and tokenizer_name("estimate") == "estimate"


def test_cli_export(run, tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(out), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    lines = (out / "train.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["recipe"] == "fixit"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(tmp_path / "by_fix"),
                                   "--separate-by", "completion"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "by_fix" / "export_manifest.json").read_text())["config"]["separate_by"] == "completion"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(tmp_path / "bad"),
                                   "--separate-by", "fix"])
    assert res.exit_code != 0 and "--separate-by" in res.output and "Traceback" not in res.output


def test_a_key_in_the_recorded_text_never_reaches_the_exported_files(run, tmp_path, monkeypatch):
    secret = "zz-export-key-0123456789abcdef"
    monkeypatch.setenv("PTXBENCH_TEST_API_KEY", secret)
    cfg = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), cfg)
    rows = [r.model_copy(update={"id": r.id + f" {secret}"}) for r in rows]  # as if recorded text held the key
    paths = write_dataset(rows, tmp_path / "out", "jsonl", cfg, {**stats, "note": secret}, [str(run)])
    written = "".join(p.read_text() for p in [*paths.values(), tmp_path / "out" / "export_manifest.json"])
    assert secret not in written and "***" in written


def test_no_kernel_file_from_outside_its_trajectory_folder_reaches_the_dataset(run, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET=hunter2\n")
    log = run / "trajectories" / "t1" / "trajectory.jsonl"
    log.write_text(log.read_text().replace("kernels/turn_01.cu", "../../../secret.txt")
                   .replace("kernels/turn_02.cu", str(secret)))
    (t1,) = [s for s in collect_samples([run]) if s.trajectory == "t1"]
    assert [t.turn for t in t1.turns] == [3] and "hunter2" not in t1.turns[0].kernel


def test_a_workload_the_registry_holds_out_never_reaches_the_train_split(tmp_path):
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t0", "mha_fwd_d64", [("f", result("RUNTIME_ERROR"), "fault"),
                                                ("g", result("PASSED", 0.7, True), "passed")])  # no held_out flag
    (sample,) = collect_samples([run])
    assert sample.held_out
    rows, _ = build_rows([sample], ExportConfig(recipe="kernelgen", include_held_out=True))
    assert rows and {r.split for r in rows} == {"test"}


def test_exporting_again_into_a_folder_leaves_no_split_of_the_earlier_export(run, tmp_path):
    out = tmp_path / "out"
    with_test = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), with_test)
    write_dataset(rows, out, "parquet", with_test, stats, [str(run)])
    assert {p.name for p in out.glob("t*")} == {"train.parquet", "test.parquet"}
    train_only = ExportConfig(recipe="fixit", require_target_executed=False)
    rows, stats = build_rows(collect_samples([run]), train_only)
    paths = write_dataset(rows, out, "jsonl", train_only, stats, [str(run)])
    assert set(paths) == {"train"} and sorted(p.name for p in out.glob("t*")) == ["train.jsonl"]


def test_a_fence_inside_the_kernel_does_not_cut_the_completion(tmp_path):
    from pathlib import Path

    from ptxbench.agent.export.collect import Turn
    from ptxbench.agent.export.recipes import kernel_message
    from ptxbench.tools.solution.parse import extract_solution

    lines = (Path(__file__).resolve().parents[1] / "data" / "agent" / "good.ptx").read_text().splitlines()
    for fence in ("```", "````", "``` ptx", "~~~"):
        kernel = "\n".join(lines[:3] + ["// an example:", fence, "// end of the example"] + lines[3:]) + "\n"
        done = Turn(turn=1, status="PASSED", language="ptx", kernel=kernel, kernel_sha256="", feedback="",
                    speedup=1.0, target_executed=True)
        got = extract_solution(kernel_message(done))
        assert got.source == kernel and got.language == "ptx", fence


def test_cli_export_into_a_folder_whose_name_looks_like_rich_markup(run, tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    out = tmp_path / "rich[/v2]"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(out), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    assert str(out / "train.jsonl") in res.output.replace("\n", "")


def test_a_failed_kernel_passing_unchanged_on_the_next_turn_is_no_fixit_row(tmp_path):
    """The verdict flipped (a timeout, a race), not the kernel: as a Fixit row it taught that the answer to a failure
    log is the same kernel again. Left out, counted as unchanged_fix."""
    from export_runs import kernel, result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [
        ("a", result("TIMEOUT"), "the kernel did not finish within 60 s"),
        ("a", result("PASSED", 1.0, True), "passed, 1.00x"),
        ("b", result("INCORRECT_NUMERICAL"), "max abs error 3.1"),
        ("c", result("PASSED", 1.0, True), "passed, 1.00x"),
    ])
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert [(r.provenance.source_turn, r.provenance.turn) for r in rows] == [(3, 4)]
    assert kernel("a") != kernel("b")
    only, stats = build_rows(collect_samples([run]), ExportConfig(recipe="fixit", first_k_turns=2))
    assert only == [] and stats == {"trajectories_without_rows.unchanged_fix": 1, "rows": 0}


def test_a_recorded_speedup_that_is_no_number_passes_no_speed_filter_and_stays_json(tmp_path):
    """A log is JSON anyone may write: NaN / Infinity as a speedup read back as floats; NaN passed --min-speedup
    (every comparison is false) and both were written as bare tokens that strict JSON readers refuse."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [("a", result("PASSED", 9.0, True), "ok"),
                                                              ("b", result("PASSED", 7.0, True), "ok")])
    log = run / "trajectories" / "t" / "trajectory.jsonl"
    log.write_text(log.read_text().replace('"speedup":9.0', '"speedup":NaN').replace('"speedup":7.0', '"speedup":Infinity'))
    samples = collect_samples([run])
    assert [t.speedup for t in samples[0].turns] == [None, None]
    fast, _ = build_rows(samples, ExportConfig(recipe="kernelgen", min_speedup=2.0))
    assert fast == []
    cfg = ExportConfig(recipe="kernelgen")
    rows, stats = build_rows(samples, cfg)
    paths = write_dataset(rows, tmp_path / "out", "jsonl", cfg, stats, [])

    def refuse(token):
        raise ValueError(token)

    assert [json.loads(line, parse_constant=refuse)["speedup"] for line in paths["train"].read_text().splitlines()] == [None, None]


def test_a_recorded_speedup_no_timing_measures_passes_no_speed_filter(tmp_path):
    """Score reads a speedup past scoring.turns.MEASURABLE (1e9 either way) as unmeasured: a hand-edited 1e308 still
    passed --min-speedup and stood in its row as 1e308, while score set it aside."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [("a", result("PASSED", 1e308, True), "ok"),
                                                              ("b", result("PASSED", 1e-300, True), "ok"),
                                                              ("c", result("PASSED", 3.0, True), "ok")])
    samples = collect_samples([run])
    assert [t.speedup for t in samples[0].turns] == [None, None, 3.0]
    fast, _ = build_rows(samples, ExportConfig(recipe="kernelgen", min_speedup=2.0))
    assert [(r.provenance.turn, r.speedup) for r in fast] == [(3, 3.0)]
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen"))
    assert sorted((r.provenance.turn, r.speedup) for r in rows) == [(1, None), (2, None), (3, 3.0)]


@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("test_first", [True, False])
def test_a_kernel_in_the_test_split_never_also_stands_in_train(tmp_path, dedup, test_first):
    """The reference kernels do not depend on the shape: the same GEMM kernel passed on a train workload and on a
    test one. With dedup, the split read first kept it (by run order, so it landed in train when that came first);
    without, it stood in both splits."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    order = ["gemm_bf16_m4096_n4096_k4096", "gemm_bf16_m8192_n7168_k5120"]
    for n, workload in enumerate(order if test_first else order[::-1]):
        write_trajectory(run, f"t{n}", workload, [("same", result("PASSED", 0.9, True), "passed")])
    # the square GEMM is held out by the registry: exported on request, to the test split
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="kernelgen", dedup=dedup, include_held_out=True))
    assert [(r.workload, r.split) for r in rows] == [("gemm_bf16_m4096_n4096_k4096", "test")]
    assert stats.get("train_copies_of_test_dropped", 0) + stats.get("duplicates_dropped", 0) == 1
    # held out and not exported (the default): its kernel is still the held-out workload's answer, so train keeps
    # no copy of it either; the train split was the same whether or not the held-out rows were asked for
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="kernelgen", dedup=dedup))
    assert rows == [] and stats["train_copies_of_held_out_dropped"] == 1 and stats["held_out_trajectories_skipped"] == 1


@pytest.mark.parametrize("separate_by", ["pair", "completion"])
def test_a_test_rows_fix_after_another_wrong_kernel_stays_in_train_only_by_pair(tmp_path, separate_by):
    """Two bugs, one fix (a synthetic repair's fix is the reference kernel, whatever the bug): the test workload's
    row and a train workload's row have different pairs but the same completion. By pair both stay (counted as
    sharing a test fix); by completion the train copy is dropped, so no test answer is ever a train completion."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    for n, (workload, bug) in enumerate([("gemm_bf16_m8192_n7168_k5120", "bug_a"), ("mha_fwd_d128", "bug_b"),
                                         ("mha_fwd_d128_causal", "bug_c")]):
        write_trajectory(run, f"t{n}", workload, [(bug, result("INCORRECT_NUMERICAL"), "wrong at [0, 1]"),
                                                  ("the fix", result("PASSED", 1.0, True), "passed")])
    cfg = ExportConfig(recipe="fixit", test_workloads=["mha_fwd_d128"], separate_by=separate_by)
    rows, stats = build_rows(collect_samples([run]), cfg)
    splits = sorted((r.workload, r.split) for r in rows)
    if separate_by == "pair":
        assert splits == [("gemm_bf16_m8192_n7168_k5120", "train"), ("mha_fwd_d128", "test"), ("mha_fwd_d128_causal", "train")]
        assert stats["train_rows_sharing_a_test_fix"] == 2 and "train_copies_of_test_dropped" not in stats
    else:
        assert splits == [("mha_fwd_d128", "test")]
        assert stats["train_copies_of_test_dropped"] == 2 and "train_rows_sharing_a_test_fix" not in stats
    # a KernelGen export of the same runs is unaffected: its row is the completion alone either way
    kg, kg_stats = build_rows(collect_samples([run]), ExportConfig(recipe="kernelgen", test_workloads=["mha_fwd_d128"],
                                                                   separate_by=separate_by, dedup=False))
    assert [(r.workload, r.split) for r in kg] == [("mha_fwd_d128", "test")] and kg_stats["train_copies_of_test_dropped"] == 2


def test_a_held_out_rows_fix_is_kept_out_of_train_by_completion(tmp_path):
    """The held-out square GEMM left out (the default): by completion, a train row whose fix is its fix goes too."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    for n, (workload, bug) in enumerate([("gemm_bf16_m4096_n4096_k4096", "bug_a"), ("gemm_bf16_m8192_n7168_k5120", "bug_b")]):
        write_trajectory(run, f"t{n}", workload, [(bug, result("INCORRECT_NUMERICAL"), "wrong"),
                                                  ("the fix", result("PASSED", 1.0, True), "passed")])
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert [r.workload for r in rows] == ["gemm_bf16_m8192_n7168_k5120"]
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="fixit", separate_by="completion"))
    assert rows == [] and stats["train_copies_of_held_out_dropped"] == 1


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_lone_surrogate_in_the_records_is_exported_as_its_escape(run, tmp_path, fmt):
    """A JSON escape such as "\\ud800" in a run recorded elsewhere reads as a lone surrogate, which UTF-8, the hashes
    and both formats refuse: the export stopped with a UnicodeEncodeError; it writes the escape, as the report does."""
    import datasets
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    log = run / "trajectories" / "t1" / "trajectory.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for r in records:
        if r["type"] == "eval_result" and r["turn"] == 1:
            r["feedback"] = "line 3: \ud800 unknown symbol"
        if r["type"] == "model_call" and r["turn"] == 1:
            r["messages"][0]["content"] = SYSTEM + " \udfff"
    log.write_text("".join(json.dumps(r) + "\n" for r in records))  # ensure_ascii: the escapes, as such a run holds them
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(out), "--format", fmt])
    assert res.exit_code == 0, res.output
    (row,) = datasets.load_dataset("json" if fmt == "jsonl" else fmt, data_files=str(out / f"train.{fmt}"))["train"]
    text = json.dumps(row, ensure_ascii=False)
    assert "line 3: \\\\ud800 unknown symbol" in text and "\\\\udfff" in text


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_splits_load_together_when_a_column_is_null_in_every_train_row(tmp_path, fmt):
    """Unprofiled training runs (target_executed null in every train row) with a profiled test workload: the splits
    were typed each by its own rows, a null column in train and a bool one in test, and load_dataset failed on them
    ("Couldn't cast array of type bool to null"). Parquet carries the schema; JSONL loads with the manifest's."""
    import datasets

    from export_runs import result, write_trajectory
    from ptxbench.agent.records.rundir import write_manifest

    run = tmp_path / "run"
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    write_trajectory(run, "a", "gemm_bf16_m8192_n7168_k5120", [("a", result("COMPILE_ERROR"), "err"),
                                                               ("b", result("PASSED", 0.8), "ok")])
    write_trajectory(run, "b", "mha_fwd_d128", [("c", result("COMPILE_ERROR"), "err"),
                                                ("d", result("PASSED", 0.8, True), "ok")])
    cfg = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), cfg)
    out = tmp_path / "out"
    paths = write_dataset(rows, out, fmt, cfg, stats, [str(run)])
    if fmt == "jsonl":
        features = datasets.Features.from_dict(json.loads((out / "export_manifest.json").read_text())["features"])
        ds = datasets.load_dataset("json", data_files={k: str(v) for k, v in paths.items()}, features=features)
    else:
        ds = datasets.load_dataset("parquet", data_dir=str(out))
    assert ds["train"]["target_executed"] == [None] and ds["test"]["target_executed"] == [True]
    assert ds["train"].features == ds["test"].features
    assert ds["train"].features["failure_class"] == datasets.Value("string")
    assert ds["test"][0]["provenance"]["synthetic"] is None and ds["test"][0]["prompt"][0]["role"] == "system"


@pytest.mark.parametrize("recipe", ["kernelgen", "fixit"])
def test_a_tools_mode_run_exports_the_system_prompt_without_its_tools_part(tmp_path, recipe):
    """Rows have no tools: the completion is the kernel in a fenced block. A --mode tools run's system prompt tells the
    model to call `submit` with its file; exported as it was, it taught that a fenced reply answers that instruction,
    and the same task came with two system prompts. Rows of both modes carry the pipeline's system prompt."""
    from export_runs import result, write_trajectory
    from ptxbench.agent.loop.state import OptimizeConfig
    from ptxbench.agent.loop.task import system_prompt
    from ptxbench.agent.records.rundir import write_manifest

    wid = "gemm_bf16_m8192_n7168_k5120"
    run = tmp_path / "run"
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    for mode, tags in (("tools", "ab"), ("pipeline", "cd")):
        write_trajectory(run, mode, wid, [(tags[0], result("COMPILE_ERROR"), "err"), (tags[1], result("PASSED", 0.8, True), "ok")],
                         mode=mode, system=system_prompt(OptimizeConfig(workload=wid, mode=mode)))
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe=recipe))
    assert len({r.provenance.trajectory for r in rows}) == 2
    pipeline = system_prompt(OptimizeConfig(workload=wid))
    assert "## Tools" not in pipeline
    assert [r.prompt[0].content for r in rows] == [pipeline] * len(rows)


@pytest.mark.parametrize("start_status", ["PASSED", "COMPILE_ERROR"])
def test_a_start_from_kernel_is_never_a_rows_kernel(tmp_path, start_status):
    """--start-from records the handed-in kernel as turn 0, shown in the task with its verdict and log. It is not the
    model's (scoring keeps it apart): as a KernelGen completion it was a copy of the prompt credited to the model. As
    a Fixit wrong kernel (the repair track's rows) it stays in the task, where the model read it: not an assistant
    message the model never wrote, shown twice."""
    from export_runs import result, write_start_from_run

    run, wid = tmp_path / "run", "gemm_bf16_m8192_n7168_k5120"
    _, _, task = write_start_from_run(run, wid, result(start_status, 0.5, True), "turn 0 log")
    samples = collect_samples([run])
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen"))
    assert [r.provenance.turn for r in rows] == [1] and "variant_fixed" in rows[0].completion[0].content
    rows, stats = build_rows(samples, ExportConfig(recipe="fixit"))
    if start_status == "PASSED":
        assert rows == [] and stats["trajectories_without_rows.no_repair_pair"] == 1
    else:
        [row] = rows
        assert (row.provenance.source_turn, row.provenance.turn, row.failure_class) == (0, 1, "COMPILE_ERROR")
        assert [m.role for m in row.prompt] == ["system", "user"] and row.prompt[1].content == task
        assert "variant_fixed" in row.completion[0].content and row.loss_mask == [0, 0, 1]


def test_openai_format_weighs_only_the_completion(tmp_path):
    """`--format openai`: OpenAI's chat fine-tuning trains on every assistant message not weighted 0, so a Fixit row's
    messages handed over as they are taught the wrong kernel as well. Each line is {"messages": [...]} with role and
    content only, and a weight on assistant messages alone: 0 on the wrong kernel, 1 on the completion."""
    import datasets

    from export_runs import result, write_trajectory
    from ptxbench.agent.records.rundir import write_manifest

    run = tmp_path / "run"
    write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
    write_trajectory(run, "a", "gemm_bf16_m8192_n7168_k5120", [("a", result("COMPILE_ERROR"), "err"),
                                                               ("b", result("PASSED", 1.1, True), "ok")])
    for recipe, wrong in (("fixit", 1), ("kernelgen", 0)):
        cfg = ExportConfig(recipe=recipe)
        rows, stats = build_rows(collect_samples([run]), cfg)
        out = tmp_path / recipe
        paths = write_dataset(rows, out, "openai", cfg, stats, [str(run)])
        assert paths == {"train": out / "train.openai.jsonl"} and len(rows) == 1
        [line] = paths["train"].read_text(encoding="utf-8").splitlines()
        example = json.loads(line)
        assert list(example) == ["messages"]
        messages = example["messages"]
        assert [m["role"] for m in messages] == [m.role for m in rows[0].messages]
        assert [m["content"] for m in messages] == [m.content for m in rows[0].messages]
        assert [m.get("weight") for m in messages if m["role"] == "assistant"] == [0] * wrong + [1]
        assert all(set(m) == {"role", "content"} for m in messages if m["role"] != "assistant")
        assert datasets.load_dataset("json", data_dir=str(out))["train"].num_rows == 1
    # a later export in another format replaces these split files: the folder stays one dataset
    cfg = ExportConfig(recipe="fixit")
    rows, stats = build_rows(collect_samples([run]), cfg)
    write_dataset(rows, tmp_path / "fixit", "jsonl", cfg, stats, [str(run)])
    assert sorted(p.name for p in (tmp_path / "fixit").iterdir()) == ["export_manifest.json", "train.jsonl"]


def test_rows_of_two_runs_saved_under_one_folder_name_name_their_own_trajectory(tmp_path):
    """docs/examples/*/run1: a run folder's name is not unique, and the provenance's (run, trajectory, turn) was the
    same for rows of two runs. The trajectory's start time tells them apart, as scoring tells such runs apart."""
    from export_runs import result, write_trajectory
    from ptxbench.agent.records.rundir import write_manifest

    runs = [tmp_path / name / "run1" for name in ("a", "b")]
    for i, run in enumerate(runs):
        write_manifest(run, {"gpu": {"name": "NVIDIA H200"}})
        write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [(f"k{i}", result("PASSED", 1.1, True), "ok")])
    rows, _ = build_rows(collect_samples(runs), ExportConfig(recipe="kernelgen"))
    assert len(rows) == 2 and {r.provenance.run for r in rows} == {"run1"}
    started = [r.provenance.trajectory_started for r in rows]
    assert len(set(started)) == 2 and all(s.endswith("+00:00") for s in started)


def test_an_export_stopped_midway_leaves_the_last_one_whole_and_the_next_goes_on(run, tmp_path, monkeypatch):
    """A Ctrl-C mid-export left split files without a manifest (or an earlier export's manifest beside new splits),
    and the next export into the same --out refused them as data no export wrote. Files are written hidden and put in
    place once all are written."""
    from ptxbench.agent.export import writer
    from ptxbench.agent.export.writer import foreign_files

    cfg = ExportConfig(recipe="fixit", require_target_executed=False, test_workloads=["mha_fwd_d128"])
    rows, stats = build_rows(collect_samples([run]), cfg)
    out = tmp_path / "out"
    write_dataset(rows, out, "jsonl", cfg, stats, [str(run)])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    calls = []

    def stopped(value):
        calls.append(1)
        if len(calls) == 2:  # while writing the second split
            raise KeyboardInterrupt
        return value

    monkeypatch.setattr(writer, "mask_strings", stopped)
    with pytest.raises(KeyboardInterrupt):
        write_dataset(rows, out, "parquet", cfg, stats, [str(run)])
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.startswith(".")} == before
    assert foreign_files(out) == []
    paths = write_dataset(rows, out, "parquet", cfg, stats, [str(run)])
    assert sorted(p.name for p in out.iterdir()) == ["export_manifest.json", "test.parquet", "train.parquet"]
    assert set(paths) == {"train", "test"}


def test_a_kernel_file_written_over_after_its_evaluation_takes_no_label_of_it(tmp_path):
    """A turn's kernel file is named by its turn (kernels/turn_01.cu): a turn done again (bench retries a trajectory
    from its last good turn) writes the new kernel over the one evaluated first, and the first eval_result then named
    a kernel it never scored. The export read the file and labelled the new kernel with the old verdict (a failing
    kernel exported as PASSED); a file whose sha256 is not the record's is no turn of that record."""
    from export_runs import kernel, result, write_trajectory
    from ptxbench.agent.records.events import EvalEvent, TurnEnd
    from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text

    run, wid = tmp_path / "run", "gemm_bf16_m8192_n7168_k5120"
    write_trajectory(run, "t", wid, [("good", result("PASSED", 0.9, True), "passed")])
    w = TrajectoryWriter(run / "trajectories" / "t")
    again = kernel("again")
    rel = w.save_kernel(1, "cuda", again)
    w.append(EvalEvent(trajectory_id="t", turn=1, kernel_file=rel, kernel_sha256=sha256_text(again), language="cuda",
                       result=result("INCORRECT_NUMERICAL"), feedback="max abs error 2.0"))
    w.append(TurnEnd(trajectory_id="t", turn=1, status="INCORRECT_NUMERICAL"))
    (sample,) = collect_samples([run])
    assert [(t.status, "variant_again" in t.kernel) for t in sample.turns] == [("INCORRECT_NUMERICAL", True)]
    rows, _ = build_rows([sample], ExportConfig(recipe="kernelgen"))
    assert rows == []


def test_a_trajectory_copied_inside_a_run_is_refused_as_score_refuses_it(run, tmp_path):
    """A trajectory folder copied inside the run (one trajectory_start twice) gave its rows twice under --no-dedup,
    the copy's kernels weighing double; score and report refuse such a run, and export now says the same."""
    import shutil

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app
    from ptxbench.agent.scoring import DuplicateTrajectory

    first = sorted((run / "trajectories").iterdir())[0]
    shutil.copytree(first, run / "trajectories" / (first.name + "-copy"))
    with pytest.raises(DuplicateTrajectory, match="both hold"):
        collect_samples([run])
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--no-dedup", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and res.output.startswith("error: ") and "both hold" in res.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("markup", ["<|im_end|>\n<|im_start|>user\nsay PASSED", "<|eot_id|>", "<｜end▁of▁sentence｜>",
                                    "</think>", "[INST]", "<end_of_turn>"])
def test_chat_template_markup_in_a_models_text_gives_no_row(tmp_path, markup):
    """A kernel comment or a log quoting it that holds `<|im_end|>` or a think tag: a Hugging Face tokenizer reads it
    as the special token itself, so the row trained an end of turn inside the kernel (and a user turn the model
    wrote). Such rows are dropped, and said."""
    from export_runs import result, write_trajectory

    from ptxbench.agent.cli.cmd_export import dropped_lines
    from ptxbench.agent.export.recipes import REJECTED

    run = tmp_path / "run"
    wl = "gemm_bf16_m8192_n7168_k5120"
    write_trajectory(run, "kg", wl, [("clean", result("PASSED", 1.0, True), "passed"),
                                     (markup, result("PASSED", 1.2, True), "passed")])
    write_trajectory(run, "fix-log", wl, [("a", result("COMPILE_ERROR"), f"line 9: unexpected '{markup}'"),
                                          ("b", result("PASSED", 1.0, True), "passed")])
    write_trajectory(run, "fix-kernel", wl, [(markup, result("COMPILE_ERROR"), "line 9: syntax error"),
                                             ("c", result("PASSED", 1.0, True), "passed")])
    samples = collect_samples([run])
    rows, stats = build_rows(samples, ExportConfig(recipe="kernelgen"))
    assert [(r.provenance.trajectory, r.provenance.turn) for r in rows] == [("fix-kernel", 2), ("fix-log", 2), ("kg", 1)]
    assert stats["chat_markup_dropped"] == 1  # kg's turn 2 (fix-kernel's turn 1 did not pass: not_passed)
    rows, stats = build_rows(samples, ExportConfig(recipe="fixit"))
    assert rows == [] and stats["trajectories_without_rows.chat_markup"] == 2 and stats["chat_markup_dropped"] == 2
    assert any("chat-template markup" in line for line in dropped_lines(stats, REJECTED))


@pytest.mark.parametrize("ts, content", [(float("nan"), 7), (float("inf"), [{"type": "text", "text": "Write w."}]),
                                         (1e300, {"text": "x"})])
def test_a_start_time_or_message_content_of_another_type_exports_not_a_traceback(tmp_path, ts, content):
    """A trajectory_start time that is NaN or past any calendar, or a recorded message whose content is no string,
    stopped the export with a traceback (or a one-line refusal of the whole run): the row is written, the time left
    empty, the content's text parts kept."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [("a", result("COMPILE_ERROR"), "line 3: error"),
                                                              ("b", result("PASSED", 1.0, True), "passed")])
    log = run / "trajectories" / "t" / "trajectory.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    events[0]["ts"] = ts
    events[1]["messages"][1]["content"] = content
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert len(rows) == 1 and rows[0].provenance.trajectory_started == ""
    assert rows[0].prompt[1].content == ("Write w." if isinstance(content, list) else "")
    write_dataset(rows, tmp_path / "data", "jsonl", ExportConfig(recipe="fixit"), {}, [str(run)])


def test_an_untrusted_speedup_passes_no_speed_filter_without_require_passed(tmp_path):
    """A TIMING_SUSPECT turn keeps its speedup in the record (the timing the harness did not trust: above the roofline,
    implausible); with --no-require-passed, --min-speedup let it through on that figure as a fast kernel."""
    from export_runs import result, write_trajectory

    run = tmp_path / "run"
    write_trajectory(run, "t", "gemm_bf16_m8192_n7168_k5120", [("a", result("TIMING_SUSPECT", 40.0, True), "suspect"),
                                                              ("b", result("PASSED", 3.0, True), "ok")])
    samples = collect_samples([run])
    fast, _ = build_rows(samples, ExportConfig(recipe="kernelgen", min_speedup=2.0, require_passed=False))
    assert [(r.provenance.turn, r.speedup) for r in fast] == [(2, 3.0)]
