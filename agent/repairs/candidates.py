"""Candidate repair tasks, made on the CPU: broken kernels that the GPU has still to reject.

Three sources: the bug-injection recipe (agent/export/mutations.py + extra_mutations.py) applied to the
reference kernel of each suite workload (GEMM, the wgmma attention forwards), and its cluster / multicast classes
to the GEMM's clustered render (agent/export/bases.py); the fault corpus
(workloads/solutions/faults: every fault, no cheat_* entry, no control); and the failing submissions of
recorded trajectories (docs/examples). Identical kernels of one workload are one candidate with every
provenance listed.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from ptxbench.workloads.registry import WORKLOADS

from ..export.bases import REFERENCE, base_source, extra_bases
from ..export.mutations import MUTATIONS, Mutation
from ..models.builtin import reference_source
from ..records.rundir import load_run
from .extra_mutations import EXTRA_MUTATIONS
from .suite import HELD_OUT_CLASSES, Origin, plain_name

# The backward's two main workloads too: its bug classes (BACKWARD_CLASSES) apply to the wgmma backward, which
# builtin/reference submits for them (the suite's next build on a GPU gives them tasks).
SUITE_WORKLOADS = ("gemm_bf16_m8192_n7168_k5120", "mha_fwd_d128", "mha_fwd_d128_causal", "mha_fwd_d64",
                   "mha_fwd_d128_gqa_h32_kv8", "mha_bwd_d128", "mha_bwd_d128_causal")
NOT_REPAIRS = ("control_correct", "cached_result")  # a correct kernel; a replay cheat (caught only when timed)
FAILED = ("PASSED", "COMPILED", "INFRA_ERROR", "TIMING_SUSPECT")  # statuses that are not a repairable failure


@dataclass
class Candidate:
    workload: str
    bug_class: str
    description: str
    origin: Origin
    source: str
    provenance: list[str] = field(default_factory=list)
    base: str = REFERENCE  # the correct kernel it was made from (agent/export/bases.py): the reference, or e.g. cluster2

    @property
    def id(self) -> str:
        return f"{self.workload}__{self.bug_class}"

    @property
    def language(self) -> str:
        return "ptx" if ".entry" in self.source and "__global__" not in self.source else "cuda"

    @property
    def held_out(self) -> bool:
        return self.bug_class in HELD_OUT_CLASSES


def from_mutations(workloads=SUITE_WORKLOADS, mutations: list[Mutation] | None = None) -> list[Candidate]:
    """Each mutation on each workload's reference, and each of a further base's classes on that base (bases.py)."""
    out = []
    chosen = mutations or [*MUTATIONS, *EXTRA_MUTATIONS]
    for wid in workloads:
        bases = [(REFERENCE, reference_source(wid), chosen, "the reference kernel")]
        bases += [(b.name, base_source(wid, b.name), [m for m in chosen if b.classes is None or m.name in b.classes],
                   b.description) for b in extra_bases(wid)]
        for base, good, ms, what in bases:
            for m in ms:
                broken = m.apply(good)
                if broken is not None:
                    origin = "repair_mutation" if m in EXTRA_MUTATIONS else "mutation"
                    recipe = "agent/repairs/extra_mutations.py" if origin == "repair_mutation" else "agent/export/mutations.py"
                    out.append(Candidate(wid, m.name, m.description, origin, broken,
                                         [f"{recipe}:{m.name} on {what} of {wid}"], base))
    return out


def without_leading_comments(source: str) -> str:
    """The file without the `//` lines (and blank lines) it opens with. A fault corpus file opens with its answer,
    "// Fault: <what is wrong>. Expected: <the verdict>", and a repair task's file is shown to the model whole."""
    lines = source.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("//")), len(lines))
    return "".join(lines[first:])


def from_fault_corpus() -> list[Candidate]:
    from ptxbench.workloads.solutions.faults import HERE, load_corpus

    workload, corpus = load_corpus()
    out = []
    for name, entry in corpus.items():
        if name.startswith("cheat_") or name in NOT_REPAIRS:
            continue
        source = without_leading_comments((Path(HERE) / entry["file"]).read_text(encoding="utf-8"))
        out.append(Candidate(workload, name, entry.get("description", f"fault corpus entry {name}"), "fault_corpus",
                             source, [f"workloads/solutions/faults/{entry['file']}"]))
    return out


def from_trajectories(roots: list[Path]) -> list[Candidate]:
    """Failing scored submissions of recorded runs (each folder holding a manifest or trajectories/)."""
    out = []
    recorded: dict[tuple[str, str], dict[str, int]] = {}  # (workload, recorded_<status>) -> text hash -> its number
    for root in roots:
        for record in load_run(root):
            start = record.start
            if start is None or start.workload not in WORKLOADS:  # a workload unknown here cannot be evaluated
                continue
            bug = (start.config or {}).get("synthetic_bug")
            if bug and not plain_name(bug):  # the class names the task's folder: a recorded "../x" must not climb out
                bug = None
            for e in record.events:
                status = e.result.status if e.type == "eval_result" else ""
                if not status or status in FAILED or not e.submission:
                    continue
                source = record.kernel(e.kernel_file)
                if source is None:  # missing, unreadable, or outside the trajectory folder (rundir.read_kernel)
                    continue
                cls = bug
                if not cls:  # one id per distinct failing text: a second recorded_<status> was dropped by merge()
                    texts = recorded.setdefault((start.workload, f"recorded_{status.lower()}"), {})
                    n = texts.setdefault(hashlib.sha256(source.encode()).hexdigest(), len(texts) + 1)
                    cls = f"recorded_{status.lower()}" + (f"_{n}" if n > 1 else "")
                out.append(Candidate(start.workload, cls, (start.config or {}).get(
                    "description", f"a failing submission ({status}) of a recorded trajectory"), "trajectory", source,
                    [f"{record.folder.as_posix()}/{e.kernel_file} (turn {e.turn}, recorded {status})"]))
    return out


def merge(candidates: list[Candidate]) -> list[Candidate]:
    """One candidate per (workload, kernel text) and per id; later duplicates add their provenance."""
    by_text: dict[tuple[str, str], Candidate] = {}
    ids: set[str] = set()
    for c in candidates:
        key = (c.workload, hashlib.sha256(c.source.encode()).hexdigest())
        if key in by_text:
            by_text[key].provenance += [p for p in c.provenance if p not in by_text[key].provenance]
        elif c.id not in ids:
            by_text[key] = c
            ids.add(c.id)
    return list(by_text.values())


def all_candidates(trajectory_roots: list[Path] | None = None) -> list[Candidate]:
    return merge([*from_mutations(), *from_fault_corpus(), *from_trajectories(trajectory_roots or [])])
