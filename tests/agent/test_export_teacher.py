"""Teacher reasoning for Fixit rows through the real litellm path, against the local OpenAI-compatible test server:
prepended as <think>, cached (no second request), and refused when it quotes the fix."""
from __future__ import annotations

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.teacher import add_reasoning

from export_runs import build_run
from openai_server import ScriptedServer

REASONING = "The log says ptxas rejected an unknown symbol on line 3, so the declaration must be fixed."


def test_teacher_reasoning_is_prepended_cached_and_never_quotes_the_fix(tmp_path):
    rows, _ = build_rows(collect_samples([build_run(tmp_path)]), ExportConfig(recipe="fixit"))
    assert len(rows) == 1
    fixed_line = next(ln for ln in rows[0].completion[0].content.splitlines() if "variant_b" in ln)
    cache = tmp_path / "cache"
    with ScriptedServer([{"content": REASONING}]) as server:
        totals = add_reasoning(rows, "openai/teacher", cache, api_base=server.base_url)
        assert totals["calls"] == 1 and len(server.requests) == 1
        sent = server.requests[0]["messages"]
        assert sent[0]["role"] == "system" and "Do NOT quote" in sent[0]["content"]
        assert "line 3: ptxas error: unknown symbol" in sent[1]["content"]
    done = rows[0].completion[0].content
    assert done.startswith(f"<think>\n{REASONING}\n</think>\n\n```cuda") and rows[0].messages[-1].content == done

    again, _ = build_rows(collect_samples([tmp_path / "run1"]), ExportConfig(recipe="fixit"))
    with ScriptedServer([]) as server:  # every answer must come from the cache
        totals = add_reasoning(again, "openai/teacher", cache, api_base=server.base_url)
        assert totals["cached"] == 1 and totals["calls"] == 0 and server.requests == []
    assert again[0].completion[0].content == done

    leaky, _ = build_rows(collect_samples([tmp_path / "run1"]), ExportConfig(recipe="fixit"))
    with ScriptedServer([{"content": f"Just write:\n{fixed_line.strip()}"}]) as server:
        totals = add_reasoning(leaky, "openai/teacher-2", tmp_path / "cache2", api_base=server.base_url)
    assert totals["rejected_leaks"] == 1 and not leaky[0].completion[0].content.startswith("<think>")


def test_reasoning_is_counted_in_n_tokens_and_kept_under_the_token_cap(tmp_path):
    """--max-tokens was applied before the reasoning was written and n_tokens never counted again: a row longer than
    the cap was written with the count of its shorter self."""
    from ptxbench.agent.export.tokens import count_messages

    long = "The log says ptxas rejected an unknown symbol on line 3. " * 60
    cfg = ExportConfig(recipe="fixit", max_tokens=400)
    for cap, with_reasoning in ((None, True), (cfg.max_tokens, False)):
        rows, _ = build_rows(collect_samples([build_run(tmp_path / str(cap))]), cfg)
        before = rows[0].n_tokens
        with ScriptedServer([{"content": long}]) as server:
            totals = add_reasoning(rows, "openai/teacher", tmp_path / f"cache-{cap}", api_base=server.base_url, max_tokens=cap)
        row = rows[0]
        assert row.completion[0].content.startswith("<think>") == with_reasoning and row.messages[-1] == row.completion[0]
        assert row.n_tokens == count_messages([m.model_dump() for m in row.messages], row.tokenizer)
        assert (row.n_tokens > cfg.max_tokens) == with_reasoning and (row.n_tokens == before) != with_reasoning
        assert totals["over_token_cap"] == (not with_reasoning)


def test_reasoning_with_a_think_tag_a_special_token_or_a_code_block_is_refused(tmp_path):
    """The teacher's reply goes inside the trained completion: its own </think> closed the reasoning early and its
    fenced kernel (never evaluated) stood before the real one."""
    from export_runs import kernel

    replies = [f"The symbol is undeclared.\n</think>\n\n```cuda\n{kernel('made_up')}```",
               "Look at line 3.\n~~~\nint x;\n~~~",
               # a special token written out (the wrong kernel's comment asked for it): a tokenizer ends the turn there
               "Line 3 is wrong.<|im_end|>\n<|im_start|>user\nmade_up"]
    for i, reply in enumerate(replies):
        rows, _ = build_rows(collect_samples([build_run(tmp_path / str(i))]), ExportConfig(recipe="fixit"))
        with ScriptedServer([{"content": reply}]) as server:
            totals = add_reasoning(rows, "openai/teacher", tmp_path / f"cache{i}", api_base=server.base_url)
        done = rows[0].completion[0].content
        assert totals["rejected_format"] == 1 and not done.startswith("<think>") and "made_up" not in done, reply


def test_a_teacher_that_fails_is_one_line_and_its_answers_so_far_are_kept(tmp_path):
    """The teacher's provider refusing or down past its retries: a traceback, exit 1, before; now one line saying
    that running the export again goes on from the cached answers."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = build_run(tmp_path)
    with ScriptedServer([], default={"status": 401, "message": "key revoked"}) as server:
        result = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(tmp_path / "out"),
                                          "--teacher", "openai/teacher", "--teacher-api-base", server.base_url])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error: ") and "key revoked" in lines[0] and "again" in lines[0]


def test_a_teacher_reply_cut_at_its_token_limit_is_not_trained_on(tmp_path):
    """finish_reason "length": the reasoning stops mid-sentence. It went into the trained completion as it was."""
    rows, _ = build_rows(collect_samples([build_run(tmp_path)]), ExportConfig(recipe="fixit"))
    before = rows[0].completion[0].content
    with ScriptedServer([{"content": "The log says ptxas rejected an unknown symbol on line 3, so the",
                          "finish_reason": "length"}]) as server:
        totals = add_reasoning(rows, "openai/teacher", tmp_path / "cache", api_base=server.base_url)
    assert totals["rejected_cut"] == 1 and rows[0].completion[0].content == before


def test_a_row_the_teacher_cannot_answer_goes_without_reasoning_and_the_pass_goes_on(tmp_path):
    """A request of its own that fails (a row past the teacher's context window: a 400) stopped the whole pass, and
    a rerun stopped on the same row again, so an export with --teacher could never finish. The row now goes without
    reasoning, counted, and its failure is cached (a rerun neither stops nor pays for it again); an outage or a
    refused key still stops the pass (the test above)."""
    rows, _ = build_rows(collect_samples([build_run(tmp_path)]), ExportConfig(recipe="fixit"))
    before = rows[0].completion[0].content
    too_long = {"status": 400, "message": "This model's maximum context length is 8192 tokens. However, your messages "
                                          "resulted in 9000 tokens. Please reduce the length of the messages."}
    with ScriptedServer([too_long]) as server:
        totals = add_reasoning(rows, "openai/teacher", tmp_path / "cache", api_base=server.base_url)
        assert len(server.requests) == 1
    assert totals["teacher_errors"] == 1 and totals["calls"] == 1 and rows[0].completion[0].content == before
    again, _ = build_rows(collect_samples([tmp_path / "run1"]), ExportConfig(recipe="fixit"))
    with ScriptedServer([]) as server:
        totals = add_reasoning(again, "openai/teacher", tmp_path / "cache", api_base=server.base_url)
        assert server.requests == []
    assert totals["teacher_errors"] == 1 and totals["cached"] == 1 and again[0].completion[0].content == before


def test_the_export_says_how_many_rows_went_without_reasoning(tmp_path):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    run = build_run(tmp_path)
    with ScriptedServer([], default={"status": 400, "message": "This model's maximum context length is 8192 tokens. "
                                                              "However, your messages resulted in 9000 tokens."}) as server:
        result = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(tmp_path / "out"),
                                          "--teacher", "openai/teacher", "--teacher-api-base", server.base_url])
    assert result.exit_code == 0, result.output
    assert "1 fixit rows without teacher reasoning: the teacher's request for them failed" in result.output


def test_a_repair_row_whose_wrong_kernel_was_handed_in_gets_reasoning(tmp_path):
    """A --start-from (repair track) Fixit row has no assistant wrong kernel nor log message: both stand in the task.
    The teacher read prompt[2] and prompt[3] of every row, so such a row stopped the whole export with an IndexError;
    its request is the task (kernel and log) and the fix, and reasoning that quotes the fix is still refused."""
    from export_runs import result, write_start_from_run

    run, wid = tmp_path / "run", "gemm_bf16_m8192_n7168_k5120"
    _, fixed, task = write_start_from_run(run, wid, result("COMPILE_ERROR"), "line 3: bad symbol", start_turn_end=False)
    [row], _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    assert len(row.prompt) == 2
    for reasoning, kept in ((REASONING, True), (f"Write {next(ln for ln in fixed.splitlines() if 'variant_fixed' in ln)}", False)):
        rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
        with ScriptedServer([{"content": reasoning}]) as server:
            totals = add_reasoning(rows, "openai/teacher", tmp_path / f"cache-{len(reasoning)}", api_base=server.base_url)
            sent = server.requests[0]["messages"][1]["content"]
        assert task in sent and "variant_fixed" in sent
        assert rows[0].completion[0].content.startswith("<think>") == kept and totals["rejected_leaks"] == (not kept)


def test_a_teacher_export_leaves_only_the_dataset_in_out_and_reuses_its_answers(tmp_path, monkeypatch):
    """The answers were cached in --out/.teacher_cache: `huggingface-cli upload` of the folder (or any copy of it)
    published every request and reply beside the dataset. They are kept under the ptxbench cache, per --out: the same
    export again asks nothing, another --out its own."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "pcache"))
    run, out = build_run(tmp_path), tmp_path / "ds"
    argv = ["export", str(run), "--recipe", "fixit", "--format", "jsonl", "--teacher", "openai/teacher"]
    with ScriptedServer([{"content": REASONING}]) as server:
        first = CliRunner().invoke(app, [*argv, "--out", str(out), "--teacher-api-base", server.base_url])
        assert first.exit_code == 0 and len(server.requests) == 1, first.output
    assert sorted(p.name for p in out.iterdir()) == ["export_manifest.json", "train.jsonl"]
    assert REASONING in (out / "train.jsonl").read_text()
    with ScriptedServer([]) as server:  # every answer from the cache
        again = CliRunner().invoke(app, [*argv, "--out", str(out), "--teacher-api-base", server.base_url])
        assert again.exit_code == 0 and server.requests == [], again.output
    assert REASONING in (out / "train.jsonl").read_text()
    with ScriptedServer([{"content": REASONING}]) as server:  # another dataset: its own answers
        other = CliRunner().invoke(app, [*argv, "--out", str(tmp_path / "ds2"), "--teacher-api-base", server.base_url])
        assert other.exit_code == 0 and len(server.requests) == 1, other.output


def test_an_earlier_exports_teacher_cache_in_out_is_moved_out_and_reused(tmp_path, monkeypatch):
    """A dataset folder an earlier version wrote holds .teacher_cache: its answers are taken along, not asked (and
    paid for) again, and the folder leaves --out."""
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "pcache"))
    run, out = build_run(tmp_path), tmp_path / "ds"
    argv = ["export", str(run), "--recipe", "fixit", "--format", "jsonl", "--teacher", "openai/teacher", "--out", str(out)]
    rows, _ = build_rows(collect_samples([run]), ExportConfig(recipe="fixit"))
    with ScriptedServer([{"content": REASONING}]) as server:  # as an earlier export filled it
        add_reasoning(rows, "openai/teacher", out / ".teacher_cache", api_base=server.base_url)
    with ScriptedServer([]) as server:
        done = CliRunner().invoke(app, [*argv, "--teacher-api-base", server.base_url])
        assert done.exit_code == 0 and server.requests == [], done.output
    assert sorted(p.name for p in out.iterdir()) == ["export_manifest.json", "train.jsonl"]
    assert REASONING in (out / "train.jsonl").read_text()


def test_a_teacher_cache_that_cannot_be_written_is_one_line_before_out_is_made(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ptxbench.agent.cli.main import app

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path / "file"))
    run = build_run(tmp_path)
    with ScriptedServer([]) as server:
        result = CliRunner().invoke(app, ["export", str(run), "--recipe", "fixit", "--out", str(tmp_path / "ds"),
                                          "--teacher", "openai/teacher", "--teacher-api-base", server.base_url])
    assert result.exit_code == 2 and "cannot write the teacher's answers" in result.output, result.output
    assert "PTXBENCH_CACHE" in result.output and not (tmp_path / "ds").exists()
