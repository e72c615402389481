"""A kernel's parameters are only read: no write goes through an address `cvta.param` makes.

`cvta.param` makes the generic address of a kernel parameter (the TMA kernels read their `__grid_constant__` tensor
maps there), and of any number a kernel converts (`cvta.param.u64 %rd, 0` assembles): what lies past a parameter is
the driver's memory, no buffer of the protocol's, and nothing resets it between calls
(tests/data/cheats/attacks/param_tail_stash.cu keeps its outputs 64 KiB past one). CUDA's parameters are const and
ptxas refuses a store to one by name, so no honest kernel writes there. As module_data.py does for module data, every
register computed from a parameter's address (a `mov` of its name, any `cvta.param` or `cvta.to.param`) is followed,
into the functions it is passed to (nvcc's attention forward hands its tensor maps to a `.func` it does not inline),
and refused are: a write through it, a store of it, a return of it, a call through a pointer with it. Reads stay:
loads, prefetches, a fence, and a tensor copy's tensor map (`[map, {coordinates}]` of `cp.async.bulk.tensor`, in either
direction).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from .module_data import (_BRACKET, _PARAM, _READS, _REGISTER, _STORES_VALUES, Instruction, ModuleData, _Findings,
                          _split_top, after_written, symbols_pattern)
from .address_use import USES, only_as_address
from .ptx_flow import tainted_before
from .results import CompileIssue

_HEADER = re.compile(r"\.(?:entry|func)\s*(\([^()]*\))?\s*([A-Za-z_$][\w$]*)\s*(\([^()]*\))?", re.S)
_NAMED_SLOT = re.compile(r"\[\s*([A-Za-z_$][\w$]*)\s*(?:\+\s*\w+)?\s*\]")
_MAKES_ADDRESS = ("cvta.param", "cvta.to.param")  # a parameter-space address of any number
_PARAM_SPACE = "parameter space"
_BANK_READ = ("a word read from the parameter bank at a computed place, which may be the parameters' own address: "
              "copy a `__grid_constant__` array to registers or local memory by constant indices, or pass it in a "
              "buffer, before indexing it at run time")
_ONLY_READ = _READS | {"fence"}


@dataclass(frozen=True)
class _Function:
    name: str
    params: tuple[str, ...]  # in order
    returns: tuple[str, ...]


def _functions(data: ModuleData) -> list[_Function]:
    """Each function body's header, by the body's index (statements() counts every `{` at module scope as one)."""
    out = []
    for offset, text, function in data.parsed:
        if function >= 0 or data.code[offset + len(text): offset + len(text) + 1] != "{":
            continue
        m = _HEADER.search(text)
        out.append(_Function(m.group(2), tuple(_PARAM.findall(m.group(3) or "")), tuple(_PARAM.findall(m.group(1) or "")))
                   if m else _Function("", (), ()))
    return out


def _callee_and_args(ins: Instruction) -> tuple[str, list[str]]:
    """`call (ret), NAME, (a, b)` -> (NAME, [a, b]); a call through a register gives its register."""
    parts = [p.strip() for p in _split_top(ins.operands)]
    for i, part in enumerate(parts):
        if part and not part.startswith("("):
            args = next((p for p in parts[i + 1:] if p.startswith("(")), "()")
            return part, [a.strip() for a in args.strip("()").split(",") if a.strip()]
    return "", []


def _is_read(ins: Instruction, index: int, operand: str) -> bool:
    """Whether the `index`-th bracketed operand of `ins` is only read: a load's, a copy's source, a tensor map."""
    if ins.family in _ONLY_READ:
        return True
    return ins.family == "cp" and (index > 0 or (".tensor" in ins.opcode and "{" in operand))


class _Reach:
    """The registers holding a parameter's address, in every function, followed across calls to a fixed point."""

    def __init__(self, data: ModuleData, names: re.Pattern, params: list[str]):
        self.data, self.names, self.params = data, names, params
        self.functions = _functions(data)
        self.index = {f.name: i for i, f in enumerate(self.functions) if f.name}
        self.passed: dict[tuple[int, str], str] = {}  # (callee, its parameter) -> what the caller passed an address of
        self.findings = _Findings()

    def origin(self, ins: Instruction) -> str | None:
        if ins.opcode.startswith(_MAKES_ADDRESS):
            return _PARAM_SPACE
        if ins.family == "ld" and ".param" in ins.opcode:
            if m := _NAMED_SLOT.search(ins.operands):
                return self.passed.get((ins.function, m.group(1)))
            # through a register, or below a name (`[pA+-120]`): the parameter bank also holds the generic address of
            # the parameters, `cvta.param`'s own source, so what such a load gives is followed as one
            return _BANK_READ
        return None

    def follow(self) -> list[dict]:
        for _ in range(8):  # each round follows addresses one call deeper
            before = tainted_before(self.data.instructions, self.names, {n: n for n in self.params}, self.origin)
            passed = dict(self.passed)
            self.findings = _Findings()
            self._calls(before)
            if self.passed == passed:
                break
        return before

    def _calls(self, before: list[dict]) -> None:
        """Arguments that hold an address (`st.param [paramN], %r` before a call) taint the callee's parameter N; one
        stored in the function's own return value, or passed through a function pointer, is let out."""
        pending: dict[str, str] = {}
        for ins, held_here in zip(self.data.instructions, before):
            if ins.family == "st" and ".param" in ins.opcode:
                slot = _NAMED_SLOT.search(ins.operands)
                value = _BRACKET.sub(" ", ins.operands)
                origin = next((held_here[r] for r in _REGISTER.findall(value) if r in held_here), None)
                if origin is None or slot is None:
                    continue
                own = self.functions[ins.function] if ins.function < len(self.functions) else None
                if own is not None and slot.group(1) in own.returns:
                    self.findings.add(origin, "value", ins.line, f"`{ins.opcode}` returns an address computed from "
                                      f"a kernel parameter's: {LET_OUT}")
                else:
                    pending[slot.group(1)] = origin
            elif ins.family == "call":
                callee, args = _callee_and_args(ins)
                held = [(i, pending[a]) for i, a in enumerate(args) if a in pending]
                target = self.index.get(callee)
                for i, origin in held:
                    if target is not None and i < len(self.functions[target].params):
                        self.passed.setdefault((target, self.functions[target].params[i]), origin)
                    else:
                        self.findings.add(origin, "value", ins.line, f"`{ins.opcode}` passes an address computed "
                                          f"from a kernel parameter's to a function the check cannot follow: {LET_OUT}")
                pending = {}


LET_OUT = ("an address kept or handed on can be written through anywhere past the parameters, in the driver's memory; "
           "read the parameter where it is")


def param_writes(data: ModuleData, language: str,
                 to_source: Callable[[int], tuple[int | None, str]] | None = None) -> list[CompileIssue]:
    """Every place the PTX writes through, stores or lets out an address computed from a kernel parameter's, each with
    its line (the model's own for `ptx`; for `cuda`, the source line nvcc's `.loc` names)."""
    code_ins = data.instructions
    params = sorted(set(_PARAM.findall(data.code)))
    names = symbols_pattern(params)
    if not any(i.opcode.startswith(_MAKES_ADDRESS) or (i.family == "mov" and names.search(i.operands))
               or (i.family == "ld" and ".param" in i.opcode and not _NAMED_SLOT.search(i.operands)) for i in code_ins):
        return []  # no parameter's address is taken, nor the parameter bank read but by name
    reach = _Reach(data, names, params)
    before = reach.follow()
    findings = reach.findings

    def involved(text: str, held: dict) -> str | None:
        return next((held[r] for r in _REGISTER.findall(text) if r in held), None)

    for ins, held in zip(code_ins, before):
        if not held:
            continue
        for index, b in enumerate(_BRACKET.finditer(ins.operands)):
            origin = involved(b.group(1), held)
            if origin is not None and not _is_read(ins, index, b.group(1)):
                findings.add(origin, "write", ins.line, f"`{ins.opcode}` writes through `[{b.group(1).strip()}]`, an "
                             f"address computed from a kernel parameter's ({origin}): parameters are only read, and "
                             f"past them lies the driver's memory, where nothing is reset between calls; keep what "
                             f"a kernel writes in its outputs or a scratch buffer of the launch plan")
        if ins.family == "call" or (ins.family == "st" and ".param" in ins.opcode):
            continue  # arguments and return values: followed by _Reach
        # what it reads: the operands past the registers it defines (for the families that store values, all of them)
        outside = _BRACKET.sub(" ", ins.operands if ins.family in _STORES_VALUES else after_written(ins))
        origin = involved(outside, held)
        if origin is None:
            continue
        if not ins.dests or ins.family in _STORES_VALUES or ins.family in _READS:
            findings.add(origin, "value", ins.line, f"`{ins.opcode}` stores an address computed from a kernel "
                         f"parameter's: {LET_OUT}")
        elif not only_as_address(ins, lambda text: involved(text, held)):
            findings.add(origin, "bits", ins.line, f"`{ins.opcode}` computes on the bits of an address computed from "
                         f"a kernel parameter's ({origin}): tested, taken apart or looked up, they come back as a "
                         f"number the check no longer follows, and a write through it could reach the driver's memory "
                         f"past the parameters; an address is only {USES}")
    return findings.issues(language, to_source)
