"""Row schema of exported datasets (documented for users in docs/dataset-schema.md).

Rows are conversational prompt-completion pairs, the format TRL's SFTTrainer trains on with the
loss on the completion only: `prompt` is every message before the last, `completion` is the last
assistant message. `messages` repeats the whole conversation with `loss_mask` (1 = trained on)
for trainers that take one list.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class Provenance(BaseModel):
    run: str
    trajectory: str
    trajectory_started: str = Field("", description="the trajectory's start time (its trajectory_start): with run and "
                                    "trajectory it names the source, where two runs share a folder name")
    turn: int = Field(description="turn of the completion's kernel")
    source_turn: int | None = Field(None, description="fixit: turn of the wrong kernel")
    model: str
    gpu: str = ""
    prompt: str = ""
    kernel_sha256: str = Field(description="sha256 of the completion's kernel file")
    wrong_kernel_sha256: str | None = None
    feedback_sha256: str | None = None
    synthetic: str | None = Field(None, description="bug class when the wrong kernel was injected, not written by a model")
    replayed_from: str | None = Field(None, description="the replay/<log> model whose run resubmitted the recorded "
                                      "replies, its path from the run folder's name on (no host path: host_paths.py); "
                                      "`model` then names the model that wrote them")


class Row(BaseModel):
    id: str
    recipe: Literal["kernelgen", "fixit"]
    workload: str
    op: str
    held_out: bool
    split: Literal["train", "test"] = "train"
    failure_class: str | None = Field(None, description="fixit: the wrong kernel's EvalResult status")
    speedup: float | None = None
    target_executed: bool | None = None
    prompt: list[Message]
    completion: list[Message]
    messages: list[Message]
    loss_mask: list[int]
    n_tokens: int
    tokenizer: str
    provenance: Provenance
    # the completion's kernel, normalised (normalize.kernel_hash): what --separate-by completion keeps out of train
    _fix_key: str = PrivateAttr("")
    # where the row comes from, (sample index, place among its candidate rows): a planned row (recipes.plan_rows)
    # holds no text, and recipes.materialize builds it again from there when it is written
    _origin: tuple[int, int] = PrivateAttr((0, 0))


def dataset_features():
    """The rows' types as `datasets.Features`: Parquet files are written with them and the manifest holds them for
    JSONL, so that a column null in every row of one split (target_executed of unprofiled runs, failure_class in
    KernelGen rows) is still typed, and the splits, or a KernelGen and a Fixit export, load and concatenate together."""
    import datasets

    string, message = datasets.Value("string"), {"role": datasets.Value("string"), "content": datasets.Value("string")}
    return datasets.Features({
        "id": string, "recipe": string, "workload": string, "op": string, "held_out": datasets.Value("bool"),
        "split": string, "failure_class": string, "speedup": datasets.Value("float64"),
        "target_executed": datasets.Value("bool"), "prompt": [message], "completion": [message], "messages": [message],
        "loss_mask": [datasets.Value("int64")], "n_tokens": datasets.Value("int64"), "tokenizer": string,
        "provenance": {"run": string, "trajectory": string, "trajectory_started": string, "turn": datasets.Value("int64"),
                       "source_turn": datasets.Value("int64"), "model": string, "gpu": string, "prompt": string,
                       "kernel_sha256": string, "wrong_kernel_sha256": string, "feedback_sha256": string,
                       "synthetic": string, "replayed_from": string},
    })


class ExportConfig(BaseModel):
    recipe: Literal["kernelgen", "fixit"]
    require_passed: bool = True
    require_target_executed: bool = Field(True, description="the completion's kernel executed the target instructions at runtime")
    min_speedup: float | None = None
    first_k_turns: int | None = Field(None, description="only turns 1..k")
    max_per_group: int | None = Field(None, description="balance: at most n rows per (workload, failure class)")
    dedup: bool = True
    include_held_out: bool = False
    test_workloads: list[str] = Field(default_factory=list, description="workloads whose rows form the test split")
    separate_by: Literal["pair", "completion"] = Field(
        "pair", description="fixit: what a train row may not share with a test row (or a held-out row left out): its "
        "(wrong kernel, fix) pair, or its fix alone, so that no test answer is ever a train completion")
    tokenizer: str = Field("estimate", description="'estimate' (chars/4), 'tiktoken:<encoding>' or 'hf:<name or path>'")
    max_tokens: int | None = None
    teacher: str | None = Field(None, description="litellm model that writes the reasoning before each fixit completion")
    teacher_api_base: str | None = None
    seed: int = 0
