"""Each row's provenance names where its own label came from: the run by its folder's name, the GPU that measured
the completion's verdict and speedup, no path of the exporting host, a model only for a kernel it wrote; and a
trajectory the export cannot read is said, a damaged record's field passed over, never a traceback."""
from __future__ import annotations

import pytest

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.records.rundir import write_manifest

from export_runs import build_run, result, write_trajectory

WORKLOAD = "gemm_bf16_m8192_n7168_k5120"


def on_gpu(res: dict, gpu: str) -> dict:
    """An eval_result as the GPU evaluator writes it: the card that ran it in the result's fingerprint."""
    return {**res, "fingerprint": {"gpu": gpu}}


def test_each_row_names_the_gpu_that_measured_its_completion(tmp_path):
    """A trajectory resumed on another machine (optimize --resume, a run folder copied over) has turns measured on two
    GPUs. Every row was labelled with the first evaluation's GPU, so turn 2's H200 speedup stood as an H100's."""
    run = tmp_path / "run"
    write_manifest(run, {})
    write_trajectory(run, "t", WORKLOAD, [
        ("a", on_gpu(result("PASSED", 0.8, True), "NVIDIA H100 80GB HBM3"), "passed, 0.80x"),
        ("b", on_gpu(result("COMPILE_ERROR"), "NVIDIA H200"), "line 3: ptxas error"),
        ("c", on_gpu(result("PASSED", 1.3, True), "NVIDIA H200"), "passed, 1.30x"),
    ])
    samples = collect_samples([run])
    rows, _ = build_rows(samples, ExportConfig(recipe="kernelgen"))
    assert [(r.provenance.turn, r.speedup, r.provenance.gpu) for r in rows] == [
        (1, 0.8, "NVIDIA H100 80GB HBM3"), (3, 1.3, "NVIDIA H200")]
    fixit, _ = build_rows(samples, ExportConfig(recipe="fixit"))
    assert [(r.provenance.turn, r.provenance.gpu) for r in fixit] == [(3, "NVIDIA H200")]



def test_a_run_given_as_the_current_folder_is_named_in_every_row(tmp_path, monkeypatch):
    """`ptxbench export . --out ../ds` from inside the run: every row's provenance.run was "" (the name of Path(".")),
    while the manifest named the run by its folder."""
    run = build_run(tmp_path)
    monkeypatch.chdir(run)
    rows, _ = build_rows(collect_samples([run.relative_to(run)]), ExportConfig(recipe="kernelgen"))
    assert rows and {r.provenance.run for r in rows} == {"run1"}


def test_a_model_served_from_a_local_folder_is_named_without_the_hosts_path(tmp_path):
    """vLLM serves a checkpoint under its path unless told otherwise, so the model string of a fine-tuned model's run
    was `hosted_vllm//home/alice/ckpt/sft-1`, and every row's provenance.model told the username and folders.
    The folder is named by its name, as an hf:<folder> tokenizer is."""
    from ptxbench.agent.export.writer import write_dataset

    run = tmp_path / "run"
    write_manifest(run, {})
    write_trajectory(run, "t", WORKLOAD, [("a", result("PASSED", 1.1, True), "passed")],
                     model="hosted_vllm//home/alice/ckpt/sft-1/")
    write_trajectory(run, "u", WORKLOAD, [("b", result("PASSED", 1.2, True), "passed")],
                     model="hosted_vllm/Qwen/Qwen3-8B")
    cfg = ExportConfig(recipe="kernelgen")
    rows, stats = build_rows(collect_samples([run]), cfg)
    assert [r.provenance.model for r in rows] == ["hosted_vllm/sft-1", "hosted_vllm/Qwen/Qwen3-8B"]
    paths = write_dataset(rows, tmp_path / "out", "jsonl", cfg, stats, [str(run)])
    assert "alice" not in paths["train"].read_text()
    teacher = "hosted_vllm//home/alice/ckpt/teacher-70b"
    write_dataset(rows, tmp_path / "taught", "jsonl", cfg.model_copy(update={"teacher": teacher}),
                  {**stats, "teacher": {"teacher": teacher, "calls": 0}}, [str(run)])
    manifest = (tmp_path / "taught" / "export_manifest.json").read_text()
    assert "alice" not in manifest and "hosted_vllm/teacher-70b" in manifest


def test_a_trajectory_log_with_no_readable_start_is_said_not_dropped_unseen(tmp_path):
    """A log cut inside its first line (a kill as the trajectory began, a partial copy) has no trajectory_start: its
    trajectory was left out of the export without a word, where score and report count it."""
    import json

    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = build_run(tmp_path)
    log = run / "trajectories" / "t1" / "trajectory.jsonl"
    log.write_bytes(log.read_bytes()[:30])
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", str(run), "--recipe", "kernelgen", "--out", str(out), "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    assert "1 trajectory logs left out: no readable start" in res.output
    assert json.loads((out / "export_manifest.json").read_text())["stats"]["trajectory_logs_without_start"] == 1


def test_a_model_served_from_a_relative_folder_is_named_by_the_folders_name():
    """`vllm serve ./ckpt/sft-2` serves the model as "./ckpt/sft-2": the host's layout, as an absolute path is."""
    from ptxbench.agent.export.host_paths import model_name

    assert model_name("hosted_vllm/./ckpt/sft-2") == "hosted_vllm/sft-2"
    assert model_name("hosted_vllm/Qwen/Qwen3-8B") == "hosted_vllm/Qwen/Qwen3-8B"


def test_the_start_from_kernel_handed_back_unchanged_is_no_kernelgen_row(tmp_path):
    """`optimize --start-from best.cu` shows a passing kernel in the task; a turn that submits it again (no better idea,
    a builtin model) passed, and its KernelGen row taught copying the prompt's kernel, credited to the model, as the
    handed-in turn 0 itself would have (it is refused as a completion)."""
    from export_runs import write_start_from_run
    from ptxbench.agent.records.events import EvalEvent, TurnEnd
    from ptxbench.agent.records.rundir import TrajectoryWriter, sha256_text

    run = tmp_path / "run"
    start, _, _ = write_start_from_run(run, WORKLOAD, result("PASSED", 0.9, True), "passed, 0.90x")
    w = TrajectoryWriter(run / "trajectories" / "s")
    again = start.replace("// variant start", "// the start kernel, unchanged")  # a comment: the same kernel
    w.append(EvalEvent(trajectory_id="s", turn=2, kernel_file=w.save_kernel(2, "cuda", again), language="cuda",
                       kernel_sha256=sha256_text(again), result=result("PASSED", 0.91, True), feedback="passed"))
    w.append(TurnEnd(trajectory_id="s", turn=2, status="PASSED"))
    rows, stats = build_rows(collect_samples([run]), ExportConfig(recipe="kernelgen"))
    assert [r.provenance.turn for r in rows] == [1] and "variant_fixed" in rows[0].completion[0].content


@pytest.mark.parametrize("tags", [["replayed"], "replayed", 5, {"recorded_model": ["m0"]}])
def test_a_replays_tags_of_another_shape_export_not_a_traceback(tmp_path, tags):
    """A replay/<log> run's model calls name the replies' author and source in their response's tags. A record whose
    tags are no object (a hand-edited or foreign log) stopped the export with an AttributeError traceback, and an
    author that is no string was written as its repr. Such tags name nothing: the rows stand under the replay."""
    import json

    run = tmp_path / "run"
    write_manifest(run, {})
    write_trajectory(run, "t", WORKLOAD, [("a", result("COMPILE_ERROR"), "line 3: error"),
                                          ("b", result("PASSED", 1.0, True), "passed")], model="replay/elsewhere")
    log = run / "trajectories" / "t" / "trajectory.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for event in events:
        if event["type"] == "model_call":
            event["response"]["tags"] = tags
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    (sample,) = collect_samples([run])
    assert sample.model == "replay/elsewhere"
    rows, _ = build_rows([sample], ExportConfig(recipe="kernelgen"))
    assert [r.provenance.model for r in rows] == ["replay/elsewhere"]


@pytest.mark.parametrize("kernel_file", ["kernels/\u0000turn_02.cu", "k/" * 3000 + "turn_02.cu"])
def test_a_kernel_file_name_no_file_system_takes_is_no_kernel_not_a_traceback(tmp_path, kernel_file):
    """An eval_result naming its kernel with a NUL byte, or a path too long for the file system (a damaged or foreign
    log), stopped the export with ValueError / OSError: such a name is no kernel inside the trajectory folder."""
    import json

    run = tmp_path / "run"
    write_manifest(run, {})
    write_trajectory(run, "t", WORKLOAD, [("a", result("PASSED", 1.0, True), "passed"),
                                          ("b", result("PASSED", 1.2, True), "passed")])
    log = run / "trajectories" / "t" / "trajectory.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for event in events:
        if event["type"] == "eval_result" and event["turn"] == 2:
            event["kernel_file"] = kernel_file
    log.write_text("".join(json.dumps(e) + "\n" for e in events))
    (sample,) = collect_samples([run])
    assert [t.turn for t in sample.turns] == [1]
