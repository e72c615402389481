"""Which registers hold an address of interest before each instruction, along each PTX function's control flow.

The checks of module data and of parameters (module_data.py, param_reach.py) follow an address from where it is made
(a `mov` of a variable, a `cvta.param`) through every computation on it. Hand-written PTX reuses registers: the
knowledge pack's own `mov.u64 %rd1, tmA; cvta.param.u64 %rd1, %rd1;` is followed, in a model's kernel, by `%rd1`
loaded with an output pointer and stored through. A register is therefore followed per instruction, not per function:
a definition that is no address ends what it held, unless the definition is guarded (`@%p`: it may not run). The flow
is the function's: fall-through, every `bra` to its label (both ways for a guarded one), `brx.idx` to every label of
the function, none after an unguarded `bra`, `ret` or `exit`; where paths join, a register holds what any path gave
it. Passes over the function repeat until the labels' states stop growing (loops); should they not within
MAX_PASSES (model text may be built to converge slowly), every register is taken to hold what any of its definitions
gave it anywhere in the function, as a check that ignored the flow would. The same happens to every function left
once the states copied, merged and compared and the instructions visited reach WORK_BUDGET (which also ends the passes
of a long function early): a 400 KB module of back branches, or of `brx.idx` jumps (each to every label), with
thousands of addresses held at once, made the flow quadratic to cubic in the harness's own process (94 s; past 300 s:
bench/results/hostile_text_cost.md); read as a whole, a function costs one visit per definition."""
from __future__ import annotations

import re
from typing import Callable

from .module_data import _BRACKET, _READS, _REGISTER, _STORES_VALUES, Instruction, after_written

MAX_PASSES = 64
# register entries copied, merged or compared and instructions visited, all functions and passes of one call together
# (about a second); the project's largest kernel, the attention backward, spends about 96,000, its tuner variants up
# to 210,000 (tests/tools/test_hostile_text_cost.py)
WORK_BUDGET = 20_000_000
VISIT = 10  # what a visit of one instruction counts against it (a visit costs about as much as ten entries)
_BRACES = re.compile(r"\{([^{}]*)\}")
_BRANCHES = {"bra", "brx"}
_ENDS = {"bra", "brx", "ret", "exit", "trap"}


def _source_registers(ins: Instruction, rest: str) -> tuple[str, ...]:
    """The registers an instruction's result is computed from. A matrix product's are its accumulators and the
    fragments in braces, not its shared-memory descriptors: the product of the matrices they point to carries no bit
    of the descriptor, and the knowledge pack's own `wgmma` line takes `%rd1` as one."""
    if ins.family in ("wgmma", "mma"):
        return ins.dests + tuple(r for group in _BRACES.findall(rest) for r in _REGISTER.findall(group))
    return tuple(_REGISTER.findall(rest))


def tainted_before(code_ins: list[Instruction], names: re.Pattern, by_name: dict,
                   origin: Callable[[Instruction], object | None] | None = None) -> list[dict]:
    """For each instruction of `code_ins`, the registers that hold an address before it ({register: what it is an
    address of}): an address is made by an instruction naming a symbol of `by_name` (`names` finds them) or one
    `origin` names (whatever its operands), and carried by any instruction computing from it, except loads through it
    (the loaded value is data) and the families that store values."""
    before: list[dict] = [{}] * len(code_ins)
    work = _Work(WORK_BUDGET)
    start = 0
    while start < len(code_ins):
        end = start
        while end < len(code_ins) and code_ins[end].function == code_ins[start].function:
            end += 1
        if not work.exhausted():
            _function(code_ins, start, end, names, by_name, origin, before, work)
        else:
            _flat(code_ins, start, end, _steps(code_ins, start, end, names, by_name, origin), before)
        start = end
    return before


class _Work:
    """What one call has spent of its budget (`spent`, read by the cost test)."""

    def __init__(self, budget: int):
        self.budget, self.spent = budget, 0

    def exhausted(self) -> bool:
        return self.spent >= self.budget

    def spend(self, entries: int) -> bool:
        """Count `entries`; False once the budget is gone."""
        self.spent += entries
        return not self.exhausted()


def _steps(code_ins, start, end, names, by_name, origin) -> list[tuple]:
    """Per instruction: (what its dests become: an origin, "sources" (from its source registers) or None, the source
    registers)."""
    steps = []
    for ins in code_ins[start:end]:
        if not ins.dests or ins.family in _STORES_VALUES:
            steps.append((None, ()))
        elif (made := origin(ins) if origin else None) is not None:
            steps.append((made, ()))
        elif ins.family in _READS:
            steps.append((None, ()))
        else:
            rest = _BRACKET.sub(" ", after_written(ins))
            named = next((by_name[n] for n in names.findall(rest)), None)
            steps.append((named, ()) if named is not None else ("sources", _source_registers(ins, rest)))
    return steps


def _function(code_ins, start, end, names, by_name, origin, before, work: _Work) -> None:
    steps = _steps(code_ins, start, end, names, by_name, origin)
    labels = [label for ins in code_ins[start:end] for label in ins.labels]
    at_label: dict[str, dict] = {}
    for _ in range(MAX_PASSES):
        changed = False
        state: dict = {}
        for k in range(start, end):
            ins = code_ins[k]
            for label in ins.labels:
                if at_label.get(label):
                    work.spend(len(state) + len(at_label[label]))
                    state = {**at_label[label], **state}
            before[k] = state
            after = _after(ins, steps[k - start], state)
            if after is not state and not work.spend(len(after)):
                return _flat(code_ins, start, end, steps, before)
            state = after
            if ins.family in _BRANCHES:
                for target in _targets(ins, labels):
                    if not work.spend(1 + 2 * len(state) + len(at_label.get(target, ()))):
                        return _flat(code_ins, start, end, steps, before)
                    joined = {**state, **at_label.get(target, {})}
                    if joined.keys() != at_label.get(target, {}).keys():
                        at_label[target], changed = joined, True
            if ins.family in _ENDS and not ins.guarded:
                state = {}
        if not changed:
            return
        if not work.spend(VISIT * (end - start)):
            break
    _flat(code_ins, start, end, steps, before)


def _after(ins: Instruction, step: tuple, state: dict) -> dict:
    became, regs = step
    if became == "sources":
        became = next((state[r] for r in regs if r in state), None)
    if became is None:
        if ins.guarded or not any(d in state for d in ins.dests):
            return state
        return {r: o for r, o in state.items() if r not in ins.dests}
    if all(d in state for d in ins.dests):
        return state
    return {**state, **{d: became for d in ins.dests}}


def _targets(ins: Instruction, labels: list[str]) -> list[str]:
    if ins.family == "brx":
        return labels  # through a table: any label of the function
    target = _REGISTER.sub("", ins.operands).strip().rstrip(";").split(",")[-1].strip()
    return [target]


def _flat(code_ins, start, end, steps, before) -> None:
    """The flow did not settle: every register holds what any definition in the function gave it, everywhere (a
    worklist over the definitions that read each register, so a long chain costs one visit per definition)."""
    held: dict = {}
    readers: dict[str, list[int]] = {}
    queue = []
    for k in range(start, end):
        became, regs = steps[k - start]
        if became == "sources":
            for r in regs:
                readers.setdefault(r, []).append(k)
        elif became is not None:
            queue.append((k, became))
    while queue:
        k, became = queue.pop()
        for d in code_ins[k].dests:
            if d not in held:
                held[d] = became
                queue += [(j, became) for j in readers.get(d, ())]
    for k in range(start, end):
        before[k] = held
