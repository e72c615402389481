"""The two recipes: KernelGen (task -> correct, target-executing kernel) and Fixit (wrong kernel + the
real evaluation log -> fixed kernel), with the filters, balance, de-duplication and split applied."""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator

from ...tools.results import MODEL_FAILURES
from ..records.rundir import sha256_text
from .collect import TrajectorySample, Turn
from .normalize import kernel_hash
from .schema import ExportConfig, Message, Provenance, Row
from .tokens import count_messages

FENCE = {"ptx": "ptx", "cuda": "cuda"}


def _fence(kernel: str) -> str:
    """A backtick fence one longer than the longest run of backticks in the kernel (three at least): a ``` line
    inside the kernel (a comment showing an example) then cannot close the block early."""
    return "`" * max(3, max(map(len, re.findall(r"`+", kernel)), default=0) + 1)


def kernel_message(turn: Turn) -> str:
    """The kernel as a reply: one fenced block that tools/solution/parse.py's extract_solution reads back whole."""
    kernel = turn.kernel.rstrip()
    fence = _fence(kernel)
    return f"{fence}{FENCE.get(turn.language, '')}\n{kernel}\n{fence}"


# Why a turn's kernel cannot be a completion: the filter's name, and what keeps such kernels (for `export`'s report).
REJECTED = {
    "handed_in": "the --start-from kernel (turn 0), or a turn submitting it again: handed in, not written by the model",
    "compiled_only": "the kernel only compiled (--no-gpu), never ran",
    "not_passed": "the kernel did not pass",
    "target_not_executed": "the target instructions were not seen executing (--no-require-target keeps them)",
    "below_min_speedup": "slower than --min-speedup (or no trusted speedup: the output did not pass)",
    "after_first_k": "after --first-k turns",
    "no_repair_pair": "no failed turn followed by another turn (fixit)",
    "no_submission": "no evaluated submission",
    "turn_between": "a turn with no evaluated kernel (a reply without a code block) came between the failed turn and "
                    "the next kernel, which answered that turn's feedback, not the failure's",
    "feedback_unknown": "the failed turn's feedback, as the model read it, is not known: none recorded, or a replay/<log> "
                        "run whose recorded log cannot be read (its replies answered that log's feedback, not this run's)",
    "feedback_of_another_verdict": "the failed turn's feedback, as the model read it, tells another verdict than its "
                                   "recorded evaluation (a run re-evaluated by score --re-evaluate): the row's log "
                                   "and failure class would disagree",
    "unchanged_fix": "the next turn's kernel is the failed one again (up to comments and white space): its verdict changed, not its code",
    "chat_markup": "the row's text holds chat-template markup (a special token such as <|im_end|>, a think tag, [INST]): "
                   "a tokenizer reads it as a turn's end or start, not as the kernel's text",
}

# Text that chat templates and tokenizers read as structure: a special token written out (ChatML's <|im_end|>,
# Llama 3's <|eot_id|>, DeepSeek's <｜end▁of▁sentence｜>), Llama 2 / Mistral's [INST] and <<SYS>>, Gemma's turn tags,
# <s> and </s> (in that case only: `Tile<S>` is C++), a think tag (Qwen3's template keeps only what follows an
# assistant message's last </think>), and the tool-call tags (Qwen's <tool_call> / <tool_response>, added tokens of
# its tokenizer; Mistral's [TOOL_CALLS]). A Hugging Face tokenizer turns such text into the token itself: a kernel
# comment `<|im_end|>\n<|im_start|>user` trained an end of turn inside the kernel and a user turn the model wrote.
# No prompt of ptxbench holds any.
CHAT_MARKUP = re.compile(r"<\|[^|<>\s]{1,64}\|>|<｜[^｜<>\n]{1,64}｜>|</?think>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>"
                         r"|(?-i:</?s>)|</?tool_(?:call|response)>|\[/?(?:TOOL_CALLS|TOOL_RESULTS|AVAILABLE_TOOLS)\]",
                         re.IGNORECASE)


# The verdict a feedback text opens with (prompts/feedback.md: "## Turn N: STATUS ..."), as the model read it.
_TOLD_VERDICT = re.compile(r"\A\s*## Turn \d+: ([A-Z_]+)")


def _told_another_verdict(turn: Turn) -> bool:
    """Whether the turn's feedback names a verdict other than its evaluation's: `score --re-evaluate` records the new
    verdict and keeps the text the model read. A feedback of another form (not the loop's) tells nothing here."""
    told = _TOLD_VERDICT.match(turn.feedback)
    return told is not None and told.group(1) != turn.status


def _chat_markup(*texts: str) -> bool:
    return any(CHAT_MARKUP.search(text) for text in texts if text)


# --start-from's kernel, evaluated as turn 0 (loop/start_kernel.py's START_TURN) and shown in the task with its verdict
# and log: handed in, so never a completion; as a Fixit wrong kernel it stays where the model read it, in the task.
HANDED_IN_TURN = 0


def _rejected(turn: Turn, cfg: ExportConfig) -> str | None:
    """Why a turn's kernel may not be a completion (a REJECTED key), or None when it may."""
    if turn.turn == HANDED_IN_TURN:
        return "handed_in"
    if turn.status == "COMPILED":  # never run on a GPU: nothing vouches for it, whatever the filters say
        return "compiled_only"
    if cfg.require_passed and turn.status != "PASSED":
        return "not_passed"
    if cfg.require_target_executed and turn.target_executed is not True:
        return "target_not_executed"
    # a speedup is a measurement only where the output passed: a TIMING_SUSPECT turn keeps its untrusted figure in the
    # record (with --no-require-passed it would pass the filter on it), an incorrect one's timing says nothing
    if cfg.min_speedup is not None and (turn.status != "PASSED" or turn.speedup is None or turn.speedup < cfg.min_speedup):
        return "below_min_speedup"
    if cfg.first_k_turns is not None and turn.turn > cfg.first_k_turns:
        return "after_first_k"
    return None


def _row(sample: TrajectorySample, cfg: ExportConfig, prompt: list[Message], done: Turn, wrong: Turn | None, op: str,
         count: bool = True) -> Row:
    completion = [Message(role="assistant", content=kernel_message(done))]
    messages = prompt + completion
    ident = kernel_hash(*( [wrong.kernel] if wrong else []), done.kernel)
    row = Row(
        id=f"{cfg.recipe}-{ident[:16]}", recipe=cfg.recipe, workload=sample.workload, op=op,
        held_out=sample.held_out, failure_class=wrong.status if wrong else None, speedup=done.speedup,
        target_executed=done.target_executed, prompt=prompt, completion=completion, messages=messages,
        loss_mask=[0] * len(prompt) + [1],
        n_tokens=count_messages([m.model_dump() for m in messages], cfg.tokenizer) if count else 0,
        tokenizer=cfg.tokenizer,
        provenance=Provenance(
            run=sample.run, trajectory=sample.trajectory, trajectory_started=sample.started, turn=done.turn, source_turn=wrong.turn if wrong else None,
            model=sample.model, gpu=done.gpu or sample.gpu, prompt=sample.prompt, kernel_sha256=done.kernel_sha256,
            wrong_kernel_sha256=wrong.kernel_sha256 if wrong else None,
            feedback_sha256=sha256_text(wrong.feedback) if wrong else None, synthetic=sample.synthetic,
            replayed_from=sample.replayed_from,
        ),
    )
    row._fix_key = kernel_hash(done.kernel) if wrong else ident
    return row


def candidate_rows(sample: TrajectorySample, cfg: ExportConfig, op: str = "", why: Counter | None = None,
                   count: bool = True) -> list[Row]:
    """The rows of one trajectory; `why` counts the REJECTED reason of each candidate completion turned away;
    count=False leaves n_tokens 0 (a row built again for writing keeps the count its plan made)."""
    why = why if why is not None else Counter()
    head = [Message(role="system", content=sample.system), Message(role="user", content=sample.task)]
    turns = [t for t in sample.turns if not t.infra]
    if not turns:
        why["no_submission"] += 1
    head_markup = _chat_markup(sample.system, sample.task)
    if cfg.recipe == "kernelgen":
        # the handed-in kernel submitted again is still the task's kernel, not the model's: a copy of the prompt
        handed = {kernel_hash(t.kernel) for t in turns if t.turn == HANDED_IN_TURN}
        rows = []
        for t in turns:
            if reason := _rejected(t, cfg) or ("handed_in" if handed and kernel_hash(t.kernel) in handed else None) \
                    or ("chat_markup" if head_markup or _chat_markup(t.kernel) else None):
                why[reason] += 1
            else:
                rows.append(_row(sample, cfg, head, t, None, op, count))
        return rows
    rows = []
    pairs = [(w, f) for w, f in zip(turns, turns[1:]) if w.status in MODEL_FAILURES]
    if turns and not pairs:
        why["no_repair_pair"] += 1
    for wrong, fixed in pairs:
        if fixed.turn != wrong.turn + 1:
            # the reply between them (no kernel: FORMAT_ERROR) and its feedback were what the fix answered; under
            # context "last" the model no longer saw the failed turn at all
            why["turn_between"] += 1
            continue
        if not wrong.feedback:  # a replay whose recorded log is gone: what its next reply answered is unknown
            why["feedback_unknown"] += 1
            continue
        if _told_another_verdict(wrong):  # the prompt's log and the failure class are two evaluations'
            why["feedback_of_another_verdict"] += 1
            continue
        if reason := _rejected(fixed, cfg):
            why[reason] += 1
            continue
        if kernel_hash(wrong.kernel) == kernel_hash(fixed.kernel):  # a flaky verdict (a timeout, a race) is no fix
            why["unchanged_fix"] += 1
            continue
        if head_markup or _chat_markup(wrong.kernel, wrong.feedback, fixed.kernel):  # the model's text, or quoted
            why["chat_markup"] += 1
            continue
        # a handed-in wrong kernel is in the task already, with its verdict and log: the prompt is what the model read
        prompt = head if wrong.turn == HANDED_IN_TURN else head + [
            Message(role="assistant", content=kernel_message(wrong)),
            Message(role="user", content=wrong.feedback),
        ]
        rows.append(_row(sample, cfg, prompt, fixed, wrong, op, count))
    return rows


def build_rows(samples: list[TrajectorySample], cfg: ExportConfig, ops: dict[str, str] | None = None) -> tuple[list[Row], dict]:
    """All rows that pass the filters, plus counts of what each step removed (plan_rows, then every row built)."""
    plan, stats = plan_rows(samples, cfg, ops)
    built = {row._origin: row for row in materialize(plan, samples, cfg, ops)}
    return [built[row._origin] for row in plan], stats


def plan_rows(samples: list[TrajectorySample], cfg: ExportConfig, ops: dict[str, str] | None = None) -> tuple[list[Row], dict]:
    """The rows that pass the filters, without their text, plus counts of what each step removed. A row of a large
    run holds the system prompt and the kernels again (about 100 kB): holding every row at once took 2 GB for 300
    trajectories, so rows are chosen here by their ids, splits and counts alone, and built again one trajectory at a
    time by materialize() as they are written."""
    ops = ops or {}
    stats: dict[str, int] = defaultdict(int)
    rows: list[Row] = []
    seen: set[str] = set()
    withheld: list[Row] = []  # the held-out rows left out: still the held-out workloads' answers
    for index, sample in enumerate(samples):
        if sample.skipped_lines:  # a damaged log: its rows stand on less than it held
            stats["skipped_record_lines"] += sample.skipped_lines
        why: Counter = Counter()
        found = candidate_rows(sample, cfg, ops.get(sample.workload, ""), why)
        for place, row in enumerate(found):
            row._origin = (index, place)
            row.prompt, row.completion, row.messages = [], [], []
        # the trajectory gave nothing: charged to the filter that turned most of it away
        empty = (why.most_common(1)[0][0] if why else "no_submission") if not found else None
        if sample.held_out and not cfg.include_held_out:
            stats["held_out_trajectories_skipped"] += 1
            withheld.extend(found)
            if empty:  # said beside the skip, so that --include-held-out is not tried in vain
                stats[f"held_out_without_rows.{empty}"] += 1
            continue
        if empty:
            stats[f"trajectories_without_rows.{empty}"] += 1
        if why["chat_markup"]:  # said also where the trajectory gave other rows
            stats["chat_markup_dropped"] += why["chat_markup"]
        for row in found:
            # a held-out row (its workload, or its bug class) is exported only on request, and never to train on
            row.split = "test" if row.held_out or row.workload in cfg.test_workloads else "train"
            if cfg.dedup and (row.split, row.id) in seen:
                stats["duplicates_dropped"] += 1
                continue
            if cfg.max_tokens is not None and row.n_tokens > cfg.max_tokens:
                stats["over_token_cap_dropped"] += 1
                continue
            seen.add((row.split, row.id))
            rows.append(row)
    # With one `seen` for both splits, whichever split was read first kept a kernel, by run order: test wins here.
    rows = _keep_out_of_train(rows, withheld, cfg, stats)
    rows = _balance(rows, cfg, stats)
    stats["rows"] = len(rows)
    return rows, dict(stats)


def materialize(plan: list[Row], samples: list[TrajectorySample], cfg: ExportConfig,
                ops: dict[str, str] | None = None) -> Iterator[Row]:
    """The planned rows with their text, one trajectory's at a time, in the order of the samples (not the plan's:
    balance groups it by workload); each keeps its plan's split and token count."""
    ops = ops or {}
    wanted: dict[int, dict[int, Row]] = defaultdict(dict)
    for row in plan:
        wanted[row._origin[0]][row._origin[1]] = row
    for index in sorted(wanted):
        sample = samples[index]
        found = candidate_rows(sample, cfg, ops.get(sample.workload, ""), count=False)
        for place, planned in sorted(wanted[index].items()):
            row = found[place]
            if row.id != planned.id:  # the samples changed between plan and build: a bug, never a silent mix-up
                raise RuntimeError(f"export: row {planned.id} of {sample.trajectory} was built again as {row.id}")
            row.split, row.n_tokens, row._origin = planned.split, planned.n_tokens, planned._origin  # (_fix_key: _row's)
            yield row


def _keep_out_of_train(rows: list[Row], withheld: list[Row], cfg: ExportConfig, stats: dict) -> list[Row]:
    """Train rows that repeat a test row, or a held-out row left out (no --include-held-out: its kernel still answers
    the held-out workload, and train was otherwise the same whether or not they were asked for), are dropped. For
    fixit "repeat" means the same (wrong kernel, fix) pair, or with separate_by="completion" the same fix after any
    wrong kernel: a synthetic repair's fix is the reference kernel whatever the bug, so a test row's answer can stand
    in train beside another wrong kernel. Under "pair" such rows are kept and counted (train_rows_sharing_a_test_fix)."""
    by_fix = cfg.recipe == "fixit" and cfg.separate_by == "completion"
    key = (lambda r: r._fix_key) if by_fix else (lambda r: r.id)
    tested = {key(r) for r in rows if r.split == "test"}
    held = {key(r) for r in withheld}
    test_fixes = {r._fix_key for r in rows if r.split == "test"}
    kept = []
    for row in rows:
        if row.split == "train" and key(row) in tested:
            stats["train_copies_of_test_dropped"] += 1
        elif row.split == "train" and key(row) in held:
            stats["train_copies_of_held_out_dropped"] += 1
        else:
            if row.split == "train" and cfg.recipe == "fixit" and row._fix_key in test_fixes:
                stats["train_rows_sharing_a_test_fix"] += 1  # kept under "pair": said, so the choice is seen
            kept.append(row)
    return kept


def _balance(rows: list[Row], cfg: ExportConfig, stats: dict) -> list[Row]:
    """At most max_per_group rows per (workload, failure class); the fastest kernels are kept, ties by seeded order."""
    if cfg.max_per_group is None:
        return rows
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for row in rows:
        groups[(row.workload, row.failure_class)].append(row)
    rng = random.Random(cfg.seed)
    kept: list[Row] = []
    for key in sorted(groups, key=str):
        group = groups[key]
        rng.shuffle(group)
        group.sort(key=lambda r: -(r.speedup or 0.0))
        kept.extend(group[: cfg.max_per_group])
        stats["balance_dropped"] += max(0, len(group) - cfg.max_per_group)
    return kept
