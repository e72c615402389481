"""Exported Fixit data trains: one real SFTTrainer step on a tiny random causal LM, on the CPU, with the loss
on the last assistant message only."""
from __future__ import annotations

import pytest

from ptxbench.agent.export import ExportConfig, build_rows, collect_samples
from ptxbench.agent.export.writer import write_dataset

from export_runs import build_run
from tiny_lm import build_model, build_tokenizer

pytest.importorskip("trl", reason="the 'train' extra (trl, transformers) is not installed")


def test_one_sft_step_on_fixit_rows_trains_on_the_fix_only(tmp_path):
    import datasets
    import torch
    from trl import SFTConfig, SFTTrainer

    run = build_run(tmp_path)
    cfg = ExportConfig(recipe="fixit", require_target_executed=False, include_held_out=True)
    rows, stats = build_rows(collect_samples([run]), cfg)
    paths = write_dataset(rows, tmp_path / "data", "jsonl", cfg, stats, [str(run)])
    ds = datasets.load_dataset("json", data_files=str(paths["train"]), split="train")
    assert ds.num_rows == 2 and not any(ds["held_out"])  # the held-out row is exported to test, never to train on
    assert "test" in paths

    corpus = [m["content"] for row in ds for m in row["prompt"] + row["completion"]]
    tok = build_tokenizer(tmp_path / "tok", corpus * 3)
    model = build_model(len(tok))
    before = [p.detach().clone() for p in model.parameters()]

    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2, learning_rate=1e-2,
                     report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, max_length=2048,
                     completion_only_loss=True, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds.select_columns(["prompt", "completion"]),
                         processing_class=tok)

    # The loss mask: every prompt token (system, task, wrong kernel, evaluation log) is labelled -100.
    example = trainer.train_dataset[0]
    ids, labels = example["input_ids"], example["labels"]
    n_prompt = next(i for i, label in enumerate(labels) if label != -100)
    assert 0 < n_prompt < len(ids)
    assert all(label == -100 for label in labels[:n_prompt]) and labels[n_prompt:] == ids[n_prompt:]
    completion_text, prompt_text = tok.decode(ids[n_prompt:]), tok.decode(ids[:n_prompt])
    assert "```cuda" in completion_text and "/* ptxbench" in completion_text
    feedback = [r["prompt"][3]["content"] for r in ds]
    assert any(f in prompt_text for f in feedback) and not any(f in completion_text for f in feedback)

    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    assert (batch["labels"][0, :n_prompt] == -100).all() and (batch["labels"][0, n_prompt:len(ids)] != -100).all()

    out = trainer.train()
    assert torch.isfinite(torch.tensor(out.training_loss)) and out.global_step == 1
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    assert changed
