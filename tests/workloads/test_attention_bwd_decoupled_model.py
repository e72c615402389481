"""A model of the synchronisation of the `decoupled` attention backward
(workloads/solutions/attention_bwd_variants/dq_decoupled.py), played without a GPU.

The model does not restate the kernel: it reads the rendered kernel text (variant_text("decoupled")), parses the
bodies of attn_bwd, consumer_block, consumer_dq and issue_dq into statements and interprets them for one actor
(the producer thread, or one of the 8 consumer warps, as lane 0 of the warp) with its own threadIdx.x, so every
mbar_init / mbar_wait / mbar_arrive / mbar_arrive_expect_tx / tma_load_2d / bulk_load, every `if` in front of
one, every index and parity expression and every local they use (st, ph, b, lane, ...) comes from the text. From
that it makes each actor's trace of barrier operations and of data accesses:
  * TMA / bulk loads write a ring region (sQ, sL2, sdO, sDr of stage st) or K / V, landing later (a transfer the
    scheduler completes at any time, with its bytes on the barrier);
  * wgmma issues (issue_nt, issue_tn, wgmma_ss_tt) read the regions of their shared-memory operands from the
    issue until the wgmma_wait<N> that retires their commit group; generic reads (sL2[..], sDr[..]) and the dS^T
    stores (`*reinterpret_cast<uint32_t*>(buf + ..) = ..`) are instantaneous.
mbarriers are modelled as PTX defines them: a phase number, a pending arrival count that starts at the init
count, a transaction count; an arrival decrements the pending count (expect_tx adds bytes first), landed bytes
subtract from the transaction count, and the phase completes when both are 0 (pending count back to init).
`mbarrier.try_wait.parity p` returns when the current phase's parity differs from p (so on a barrier in phase k,
parity k & 1 blocks until phase k completes and parity (k - 1) & 1 returns at once).

A scheduler plays the 9 actors and the in-flight transfers in random orders (consumers at different speeds,
the producer fast or slow) and in first-ready / last-ready orders, for n_iter 1..12 and STAGES 2 and 3, and checks:
  * no deadlock (a state where nothing can move before every actor finished) and, at the end, no barrier with a
    partial phase (arrivals or bytes left over);
  * every arrival lands in the phase it is meant for (block j's arrival on barrier i of an array of n: phase
    j // n): no phase is completed by arrivals meant for a later one; bytes land in the phase of their
    expect_tx; an arrival / wait uses barrier j % n of its array;
  * every parity wait returns only after the phase it means completed (fullQ / fulldO / dsReady of block j:
    phase j // n; empty before block j's fill and dsFree before block j's dS^T: phase j // n - 1, i.e. the
    block n earlier);
  * data: a read of block j's ring stage (Q, L2, dO, Dr) or dS^T buffer begins only once that region holds
    block j, completely (every transfer landed; all 8 consumer warps' dS^T rows stored), no store into a
    region that some read has begun on, and a region is refilled / rewritten only after all 8 consumer warps
    finished reading the block it held (so dQ of block j reads between both consumers' dS^T of block j and any
    rewrite of that buffer; a stage is refilled only after both consumers released it); at the end every block
    was read by all 8 warps.
Then it shows the checks catch deliberate breakages of the text (2 buffers under code for 3, dsFree parity off
by one, no kick arrival, arrivals per warpgroup, stores / releases moved across their barriers, ...).
"""
from __future__ import annotations

import functools
import random
import re
from collections import Counter

import pytest

from ptxbench.workloads.solutions.attention_bwd_variants import variant_text


@functools.lru_cache(maxsize=1)
def kernel_text() -> str:
    return variant_text("decoupled")


# The synchronisation lines of each function, in order, as the kernel has them today. The model plays whatever
# the text says; this list pins the text it was reviewed against (a change to a wait or arrive fails here first).
SYNC_LINES = {
    "issue_dq": [
        "mbar_wait(&dsReady[b], (it / DS_BUFS) & 1);",
    ],
    "consumer_block": [
        "mbar_wait(&fullQ[st], ph);",
        "mbar_wait(&fulldO[st], ph);",
        "if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);",
        "if (lane == 0) mbar_arrive(&dsReady[b]);",
        "if (lane == 0) mbar_arrive(&empty[st]);",
    ],
    "consumer_dq": [
        "if (t % 32 == 0) mbar_arrive(&dsFree[it % DS_BUFS]);",
    ],
    "attn_bwd": [
        "mbar_init(fullKV, 1);",
        "mbar_init(&fullQ[i], 1);",
        "mbar_init(&fulldO[i], 1);",
        "mbar_init(&empty[i], 8);",
        "mbar_init(&dsReady[i], 8);",
        "mbar_init(&dsFree[i], 8);",
        "mbar_init(kick, 4);",
        "mbar_arrive_expect_tx(fullKV, 2 * KT);",
        "mbar_wait(&empty[st], ph ^ 1);",
        "mbar_arrive_expect_tx(&fullQ[st], QT + BM * 4);",
        "mbar_arrive_expect_tx(&fulldO[st], QT + BM * 4);",
        "mbar_wait(fullKV, 0);",
        "if (c == 1) mbar_wait(kick, 0);",
        "if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);",
    ],
}
# ... and the lines that shape the actors' sequences around them
SHAPE_LINES = [
    "const int st = it % STAGES;",
    "const uint32_t ph = (it / STAGES) & 1;",
    "const int b = it % DS_BUFS;",
    "for (int it = 0; it < n_iter; ++it) {",
    "if (it > 0) consumer_dq<HD>(it - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);",
    "consumer_block<HD, CAUSAL>(it, q0, key0, c, t, sK, sV, sQ + st * QT, sdO + st * QT, sL2 + st * BM,",
    "consumer_dq<HD>(n_iter - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);",
    "issue_dq<HD>(dq, it, c, sK, sdS, dsReady);",
    "constexpr int DS_BUFS = 3;",
    "static constexpr int N = HD == 128 ? 3 : 2;",
]
FUNCTIONS = ("attn_bwd", "consumer_block", "consumer_dq", "issue_dq")  # the ones the interpreter enters
WGMMA_ISSUES = ("issue_nt", "issue_tn", "wgmma_ss_tt")               # wgmma issues: read their smem operands
STRIDES = ("QT", "BM", "DS_BYTES")                                    # per-stage / per-buffer strides of regions
TMAP_BYTES = {"tmQ": "QSLAB", "tmdO": "QSLAB", "tmK": "KSLAB", "tmV": "KSLAB"}  # the box of each tensor map
SMEM = ("sK", "sV", "sQ", "sdO", "sdS", "sL2", "sDr")                # the kernel's shared-memory arrays
CONSUMER_WARPS = frozenset((c, w) for c in range(2) for w in range(4))


# ---- a small reader of the kernel's C++ -----------------------------------------------------------------

def _strip(src: str) -> str:
    src = re.sub(r"//[^\n]*", "", src)
    return "\n".join(line for line in src.split("\n") if not line.strip().startswith("#"))


def _match(s: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_:
            depth += 1
        elif s[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError(f"unbalanced {open_} at {s[i:i + 60]!r}")


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def _parse(s: str) -> list:
    """Statements: ("stmt", text) | ("block", [..]) | ("for", header, body) | ("if", cond, then, else)."""
    out, i = [], 0
    while True:
        while i < len(s) and s[i].isspace():
            i += 1
        if i >= len(s):
            return out
        node, i = _statement(s, i)
        out.append(node)


def _statement(s: str, i: int):
    while s[i].isspace():
        i += 1
    if s[i] == "{":
        j = _match(s, i, "{", "}")
        return ("block", _parse(s[i + 1:j - 1])), j
    m = re.match(r"(for|if)\s*\(", s[i:])
    if m:
        p = i + m.end() - 1
        q = _match(s, p, "(", ")")
        head = " ".join(s[p + 1:q - 1].split())
        body, j = _statement(s, q)
        if m.group(1) == "for":
            return ("for", head, body), j
        k = j
        while k < len(s) and s[k].isspace():
            k += 1
        if re.match(r"else\b", s[k:]):
            other, j = _statement(s, k + 4)
            return ("if", head, body, other), j
        return ("if", head, body, None), j
    depth, j = 0, i
    while True:
        ch = s[j]
        if ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == ";" and depth == 0:
            return ("stmt", " ".join(s[i:j + 1].split())), j + 1
        j += 1


def function(text: str, name: str) -> tuple[list[str], list]:
    """(parameter names, parsed body) of `void name(...) { ... }` in `text`."""
    src = _strip(text)
    m = re.search(rf"\bvoid {name}\(", src)
    assert m, f"no function {name} in the kernel"
    p = m.end() - 1
    q = _match(src, p, "(", ")")
    params = []
    for decl in _split_args(src[p + 1:q - 1]):
        ref = re.search(r"\(&(\w+)\)", decl)
        params.append(ref.group(1) if ref else re.findall(r"\w+", decl)[-1])
    b = src.index("{", q)
    return params, _parse(src[b + 1:_match(src, b, "{", "}") - 1])


def sync_lines(text: str, name: str) -> list[str]:
    """The mbar_* statements of a function, in text order, with the `if (...)` guarding each directly."""
    out = []

    def walk(nodes, guard=None):
        for n in nodes:
            if n[0] == "stmt" and re.match(r"mbar_(init|wait|arrive)", n[1]):
                out.append(f"if ({guard}) {n[1]}" if guard else n[1])
            elif n[0] == "block":
                walk(n[1])
            elif n[0] == "for":
                walk([n[2]])
            elif n[0] == "if":
                walk([n[2]], n[1] if n[2][0] == "stmt" else None)
                if n[3]:
                    walk([n[3]])
    walk(function(text, name)[1])
    return out


class Unknown:  # a value the model does not track (a float, a global pointer, ...)
    def __repr__(self):
        return "?"


UNKNOWN = Unknown()


class Bar(tuple):
    """An mbarrier of the kernel: (array name, index)."""


class Region(tuple):
    """A shared-memory region the model tracks: (array name, stage or buffer index)."""


def _py(expr: str) -> str:
    expr = re.sub(r"static_cast<[^>]*>", "", expr).replace("threadIdx.x", "threadIdx_x")
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    expr = re.sub(r"(?<![/])/(?![/])", "//", expr)  # operands are never negative here: C's / is floor division
    tern = re.fullmatch(r"([^?:]+)\?([^?:]+):([^?:]+)", expr)  # one unnested a ? b : c
    return f"(({tern.group(2)}) if ({tern.group(1)}) else ({tern.group(3)}))" if tern else expr


def evaluate(expr: str, env: dict):
    try:
        v = eval(_py(expr), {"__builtins__": {}}, env)  # noqa: S307 (our own kernel's expressions)
    except (NameError, SyntaxError, TypeError):
        return UNKNOWN
    if isinstance(v, bool):
        return int(v)
    return v if isinstance(v, int) else UNKNOWN


class Tracer:
    """Interprets the kernel's statements for one actor, making its trace: a list of operations
    ("init", bar, count) ("wait", bar, parity, block) ("arrive", bar, tx, block) ("load", bar, bytes, region, tag)
    ("rbegin", region, tag) ("rend", region, tag) ("read", region, tag) ("write", region, tag) ("syncthreads",)."""

    def __init__(self, text: str, env: dict):
        self.funcs = {name: function(text, name) for name in FUNCTIONS}
        self.consts = {}
        for name, expr in re.findall(r"^constexpr int (\w+) = ([^;]+);", _strip(text), re.M):
            v = evaluate(expr, self.consts)
            if v is not UNKNOWN:
                self.consts[name] = v
        self.pinned = dict(env)
        self.ops: list = []
        self.group: list = []        # wgmma reads issued since the last commit
        self.committed: list = []    # commit groups not yet retired: [[(region, tag), ..], ..]

    def run(self, name: str, args: dict):
        env = dict(self.consts) | self.pinned | args
        self.block(self.funcs[name][1], env)
        return self.ops

    # -- statements
    def block(self, nodes, env):
        for n in nodes:
            self.node(n, env)

    def node(self, n, env):
        kind = n[0]
        if kind == "block":
            self.block(n[1], dict(env))  # locals of a block stay in it (its names shadow the outer ones)
        elif kind == "for":
            m = re.fullmatch(r"int (\w+) = (.+); \1 < (.+); \+\+\1", n[1])
            if not m or evaluate(m.group(2), env) is UNKNOWN or evaluate(m.group(3), env) is UNKNOWN:
                assert not self._relevant(n), f"a loop the model cannot count around synchronisation: {n[1]}"
                return
            for v in range(evaluate(m.group(2), env), evaluate(m.group(3), env)):
                self.node(n[2], env | {m.group(1): v})
        elif kind == "if":
            cond = evaluate(n[1], env)
            if cond is UNKNOWN:
                assert not self._relevant(n), f"a condition the model cannot decide around synchronisation: {n[1]}"
                return
            branch = n[2] if cond else n[3]
            if branch is not None:
                self.node(branch, env)
        else:
            self.stmt(n[1], env)

    def _relevant(self, n) -> bool:
        return bool(re.search(r"mbar_|wgmma_|issue_|tma_load|bulk_load|consumer_|__syncthreads|\bbuf\b|sdS",
                              repr(n)))

    def stmt(self, s: str, env: dict):
        if s == "__syncthreads();":
            self.ops.append(("syncthreads",))
            return
        m = re.fullmatch(r"(\w+)(?:<[^>]*>)?\((.*)\);", s)
        if m:
            self.call(m.group(1), _split_args(m.group(2)), env, s)
            return
        m = re.fullmatch(r"\*reinterpret_cast<[^>]*>\((\w+) \+ .*\) = .*;", s)
        if m:  # a generic store through a region pointer (the dS^T rows)
            region = env.get(m.group(1))
            assert isinstance(region, Region), s
            self.ops.append(("write", region, env["it"]))
            return
        m = re.fullmatch(r"(?:const |constexpr )?(?:\w+)\* (\w+) = (.+);", s)
        if m:  # a pointer: a barrier array, a shared-memory region, or something untracked
            name, rhs = m.groups()
            if name in self.pinned:
                return
            if re.fullmatch(r"uint64_t", s.split("*")[0].split()[-1]):
                env[name] = Bar((name, 0))
            else:
                env[name] = self.region_of(rhs, env, declare=name)
            return
        m = re.fullmatch(r"(?:const |constexpr |static constexpr )?(?:int|uint32_t|uint64_t|size_t|bool) (.+);", s)
        if m:
            for decl in _split_args(m.group(1)):
                dm = re.fullmatch(r"(\w+) = (.+)", decl)
                if dm and dm.group(1) not in self.pinned:
                    desc = re.match(r"(?:desc_mn|make_desc_sw128)\((.+)\)$", dm.group(2))
                    env[dm.group(1)] = (self.region_of(_split_args(desc.group(1))[0], env) if desc
                                        else evaluate(dm.group(2), env))
            return
        for name in re.findall(r"\b(\w+)\[", s):  # generic reads of a region (sL2[q], sDr[..])
            if isinstance(env.get(name), Region):
                self.ops.append(("read", env[name], self.tag(env[name], env)))

    def region_of(self, expr: str, env: dict, declare: str | None = None):
        """The region a pointer expression points into: `base + idx * STRIDE` is stage / buffer idx of the region
        `base` (or of the region a parameter `base` was bound to); the kernel's declarations of its shared arrays
        (uint8_t* sQ = sV + KT; ...) are regions of their own."""
        if declare in SMEM:
            return Region((declare, 0))
        m = re.match(r"\(?\s*(?:reinterpret_cast<[^>]*>\()?(\w+)", expr)
        base = env.get(m.group(1)) if m else None
        if not isinstance(base, Region):
            return UNKNOWN
        idx = re.search(rf"\+ (.+?) \* ({'|'.join(STRIDES)})\b", expr)
        return base if not idx else Region((base[0], evaluate(idx.group(1), env)))

    def tag(self, region, env):
        return "kv" if region[0] in ("sK", "sV") else env.get("it", "kv")

    def bar(self, expr: str, env: dict) -> Bar:
        m = re.fullmatch(r"&(\w+)\[(.+)\]", expr)
        base = env.get(m.group(1) if m else expr)
        assert isinstance(base, Bar), f"not a barrier: {expr}"
        idx = evaluate(m.group(2), env) if m else 0
        assert idx is not UNKNOWN, expr
        return Bar((base[0], base[1] + idx))

    def call(self, fn: str, args: list[str], env: dict, s: str):
        block = env.get("it")
        if fn == "mbar_init":
            self.ops.append(("init", self.bar(args[0], env), evaluate(args[1], env)))
        elif fn == "mbar_wait":
            self.ops.append(("wait", self.bar(args[0], env), evaluate(args[1], env) & 1, block))
        elif fn in ("mbar_arrive", "mbar_arrive_expect_tx"):
            tx = evaluate(args[1], env) if fn == "mbar_arrive_expect_tx" else 0
            assert tx is not UNKNOWN, s
            self.ops.append(("arrive", self.bar(args[0], env), tx, block))
        elif fn == "tma_load_2d":
            region = self.region_of(args[0], env)
            self.ops.append(("load", self.bar(args[2], env), self.consts[TMAP_BYTES[args[1]]], region,
                             self.tag(region, env)))
        elif fn == "bulk_load":
            region = self.region_of(args[0], env)
            self.ops.append(("load", self.bar(args[3], env), evaluate(args[2], env), region, self.tag(region, env)))
        elif fn in WGMMA_ISSUES:
            for a in args[1:]:
                r = env.get(a.split()[0]) if a.split() else None
                r = r if isinstance(r, Region) else self.region_of(a, env)
                if isinstance(r, Region) and (r, self.tag(r, env)) not in self.group:
                    self.ops.append(("rbegin", r, self.tag(r, env)))
                    self.group.append((r, self.tag(r, env)))
        elif fn == "wgmma_commit":
            self.committed.append(self.group)
            self.group = []
        elif fn == "wgmma_wait":
            keep = int(re.search(r"wgmma_wait<(\d+)>", s).group(1))
            while len(self.committed) > keep:
                for r, tag in self.committed.pop(0):
                    self.ops.append(("rend", r, tag))
        elif fn in self.funcs:
            params, _ = self.funcs[fn]
            bound = {}
            for p, a in zip(params, args):
                v = env.get(a) if re.fullmatch(r"\w+", a) else None
                if isinstance(v, (Bar, Region)):
                    bound[p] = v
                elif isinstance(self.region_of(a, env), Region) and not re.fullmatch(r"\w+", a):
                    bound[p] = self.region_of(a, env)
                else:
                    bound[p] = evaluate(a, env)
            callee_env = dict(self.consts) | self.pinned | bound
            self.block(self.funcs[fn][1], callee_env)
        elif re.search(r"mbar_|tma_|bulk_|wgmma_wait|commit", fn) and fn != "mbar_fence_init":
            raise AssertionError(f"a synchronisation call the model does not know: {s}")


# ---- the actors' traces ------------------------------------------------------------------------------------

PRODUCER = "producer"


@functools.lru_cache(maxsize=4096)
def trace(text: str, actor, n_iter: int, stages: int, hd: int) -> tuple:
    """The operations of `actor` (PRODUCER: thread 0; (c, w): lane 0 of warp w of consumer c)."""
    tid = 0 if actor == PRODUCER else 128 * (actor[0] + 1) + 32 * actor[1]
    tr = Tracer(text, {"n_iter": n_iter, "STAGES": stages, "HD": hd, "CAUSAL": 0, "GQA": 0})
    ops = tr.run("attn_bwd", {"threadIdx_x": tid})
    # a loop's repeats of one instantaneous access (32 reads of sL2, 16 stores of dS^T) are one access
    return tuple(op for i, op in enumerate(ops) if not (i and op == ops[i - 1] and op[0] in ("read", "write")))


class Hang(AssertionError):
    """No actor can move and some have not finished: the kernel would hang here."""


class Violation(AssertionError):
    """An access or a barrier operation broke the protocol (early read, over-arrival, rewrite under a reader)."""


def check(cond, msg):
    if not cond:
        raise Violation(msg)


class Model:
    """mbarriers as PTX defines them, and the regions of shared memory the actors write and read."""

    def __init__(self):
        self.bars: dict = {}     # Bar -> {"count", "pending", "tx", "phase"}
        self.sizes: Counter = Counter()
        self.regions: dict = {}  # Region -> {"tag", "pending", "writers", "open", "done"}

    # barriers
    def init(self, bar, count):
        check(bar not in self.bars, f"{bar} initialised twice")
        self.bars[bar] = {"count": count, "pending": count, "tx": 0, "phase": 0}
        self.sizes[bar[0]] += 1

    def meant(self, bar, block, wait: bool) -> int:
        """The phase of `bar` an operation of block `block` is for: block j's on barrier j % n of an array of n
        is phase j // n; a wait before reusing what block j - n used (empty, dsFree) is for that block's phase."""
        n = self.sizes[bar[0]]
        if n == 1 and bar[0] in ("fullKV", "kick"):
            return 0
        check(block is not None and bar[1] == block % n, f"block {block} uses {bar}, not {bar[0]}[{block} % {n}]")
        return block // n - (1 if wait and bar[0] in ("empty", "dsFree") else 0)

    def _complete(self, b):
        if b["pending"] == 0 and b["tx"] == 0:
            b["phase"] += 1
            b["pending"] = b["count"]

    def arrive(self, bar, tx, block):
        b, meant = self.bars[bar], self.meant(bar, block, wait=False)
        check(b["phase"] == meant, f"an arrival of block {block} on {bar} (meant for phase {meant}) landed in "
                                   f"phase {b['phase']}: over-arrival / a phase completed by another's arrivals")
        check(b["pending"] > 0, f"{bar}: an arrival after its count was reached, waiting for bytes")
        b["pending"] -= 1
        b["tx"] += tx
        self._complete(b)

    def land(self, bar, nbytes, phase):
        b = self.bars[bar]
        check(b["phase"] == phase, f"bytes meant for phase {phase} of {bar} landed in phase {b['phase']}")
        b["tx"] -= nbytes
        check(b["tx"] >= 0, f"{bar}: more bytes landed than expected")
        self._complete(b)

    def ready(self, bar, parity) -> bool:  # mbarrier.try_wait.parity
        return (self.bars[bar]["phase"] & 1) != parity

    def waited(self, bar, block):
        meant = self.meant(bar, block, wait=True)
        check(self.bars[bar]["phase"] > meant, f"a wait of block {block} on {bar} returned in phase "
                                               f"{self.bars[bar]['phase']}, before phase {meant} it means completed")

    # data
    def region(self, r):
        return self.regions.setdefault(r, {"tag": None, "pending": 0, "writers": set(), "open": Counter(),
                                           "done": set(), "began": False})

    def _rewrite(self, r, tag, what):
        g = self.region(r)
        if g["tag"] == tag:
            check(not g["began"], f"{what} into {r} (block {tag}) after a read of it began")
            return g
        check(not g["open"], f"{what} of block {tag} into {r} while reads of block {g['tag']} are open: "
                             f"{dict(g['open'])}")
        if g["tag"] is not None and r[0] not in ("sK", "sV"):
            check(g["done"] >= CONSUMER_WARPS, f"{what} of block {tag} into {r} before every consumer warp read "
                                               f"block {g['tag']} there (done: {sorted(g['done'])})")
        g.update(tag=tag, pending=0, writers=set(), done=set(), began=False)
        return g

    def load(self, r, tag):
        self._rewrite(r, tag, "a load")["pending"] += 1

    def landed(self, r):
        self.region(r)["pending"] -= 1

    def store(self, actor, r, tag):
        self._rewrite(r, tag, "a dS^T store")["writers"].add(actor)

    def rbegin(self, actor, r, tag):
        g = self.region(r)
        check(g["tag"] == tag, f"{actor} reads block {tag} from {r}, which holds block {g['tag']}")
        if r[0] == "sdS":
            check(g["writers"] == set(CONSUMER_WARPS), f"{actor} reads dS^T of block {tag} from {r} before all 8 "
                                                       f"warps stored theirs ({sorted(g['writers'])})")
        else:
            check(g["pending"] == 0, f"{actor} reads block {tag} from {r} before its load landed")
        g["open"][actor] += 1
        g["began"] = True

    def rend(self, actor, r, tag):
        g = self.region(r)
        check(g["tag"] == tag and g["open"][actor] > 0, f"{actor}: the read of {r} ended on block {g['tag']}")
        g["open"][actor] -= 1
        if not g["open"][actor]:
            del g["open"][actor]
        g["done"].add(actor)


def play(text: str, n_iter: int, stages: int, hd: int = 128, order: str = "random", seed: int = 0,
         speeds: tuple = (1.0, 1.0, 1.0), tma_speed: float = 1.0) -> Model:
    """Play the kernel text's synchronisation for one CTA. `order`: "first" / "last" ready actor (producer,
    consumer 0's warps, consumer 1's warps, then transfers) or "random" with `seed`, the producer and the two
    consumers picked with weights `speeds`, the landing of transfers with `tma_speed`."""
    m = Model()
    actors = [PRODUCER] + sorted(CONSUMER_WARPS)
    traces = {a: trace(text, a, n_iter, stages, hd) for a in actors}
    # thread 0 initialises the barriers before __syncthreads; every other actor starts after it
    for a in actors:
        ops = traces[a]
        check(("syncthreads",) in ops, f"{a} never reaches __syncthreads")
        head = ops[:ops.index(("syncthreads",))]
        check(a == PRODUCER or not head, f"{a} does something before __syncthreads: {head}")
        for op in head:
            check(op[0] == "init", f"before __syncthreads: {op}")
            m.init(op[1], op[2])
    pc = {a: traces[a].index(("syncthreads",)) + 1 for a in actors}
    transfers: list = []  # (bar, bytes, phase, region)
    rng = random.Random(seed)
    weight = {a: speeds[0] if a == PRODUCER else speeds[1 + a[0]] for a in actors}

    blocked = set()  # (actor, position) of the waits that had to wait (the barrier not yet there when reached)

    def can_run(a):
        op = traces[a][pc[a]]
        if op[0] != "wait" or m.ready(op[1], op[2]):
            return True
        blocked.add((a, pc[a]))
        return False

    steps = 0
    while True:
        live = [a for a in actors if pc[a] < len(traces[a])]
        if not live and not transfers:
            break
        ready = [a for a in live if can_run(a)]
        choices = [("actor", a) for a in ready] + [("tma", i) for i in range(len(transfers))]
        if not choices:
            stuck = {a: traces[a][pc[a]] for a in live}
            raise Hang(f"hang: n_iter {n_iter}, STAGES {stages}, {order}/{seed}: {stuck}; "
                       f"barriers {[(k, v['phase'], v['pending']) for k, v in m.bars.items()]}")
        if order == "first":
            kind, x = choices[0]
        elif order == "last":
            kind, x = choices[-1]
        else:
            w = [weight[x] if kind == "actor" else tma_speed for kind, x in choices]
            kind, x = rng.choices(choices, weights=w)[0]
        steps += 1
        if kind == "tma":
            bar, nbytes, phase, region = transfers.pop(x)
            m.landed(region)
            m.land(bar, nbytes, phase)
            continue
        a, op = x, traces[x][pc[x]]
        pc[a] += 1
        if op[0] == "wait":
            m.waited(op[1], op[3])
        elif op[0] == "arrive":
            m.arrive(op[1], op[2], op[3])
        elif op[0] == "load":
            _, bar, nbytes, region, tag = op
            m.load(region, tag)
            transfers.append((bar, nbytes, m.bars[bar]["phase"], region))
        elif op[0] == "write":
            m.store(a, op[1], op[2])
        elif op[0] == "rbegin":
            m.rbegin(a, op[1], op[2])
        elif op[0] == "rend":
            m.rend(a, op[1], op[2])
        elif op[0] == "read":
            m.rbegin(a, op[1], op[2])
            m.rend(a, op[1], op[2])
        else:
            raise Violation(f"{a}: {op} after __syncthreads")
    left = {k: v for k, v in m.bars.items() if v["pending"] != v["count"] or v["tx"]}
    check(not left, f"barriers left with a partial phase: {left}")
    for r, g in m.regions.items():
        check(not g["open"], f"reads of {r} never ended: {dict(g['open'])}")
        if r[0] not in ("sK", "sV"):
            check(g["done"] >= CONSUMER_WARPS, f"block {g['tag']} in {r} was not read by every consumer warp")
    m.blocked = Counter(traces[a][i][1][0] for a, i in blocked)
    return m


SCHEDULES = ([("first", 0, (1, 1, 1), 1), ("last", 0, (1, 1, 1), 1)]
             + [("random", s, sp, tma) for s, (sp, tma) in enumerate(
                 [((1, 1, 1), 1), ((1, 10, 1), 1), ((1, 1, 10), 1), ((10, 1, 1), 1), ((0.1, 1, 1), 1),
                  ((1, 1, 1), 0.05), ((1, 50, 1), 20), ((1, 1, 50), 20), ((5, 1, 0.2), 1), ((0.2, 3, 1), 0.3),
                  ((1, 1, 1), 5), ((1, 0.3, 3), 1)] * 2)])


def play_all(text: str, n_iters=range(1, 13), configs=((128, 3), (64, 2), (128, 2), (64, 3)),
             schedules=SCHEDULES) -> Counter:
    """Every schedule for every n_iter and (HD, STAGES); the barriers whose waits ever had to wait, counted."""
    blocked = Counter()
    for n_iter in n_iters:
        for hd, stages in configs:
            for order, seed, speeds, tma in schedules:
                blocked += play(text, n_iter, stages, hd, order=order, seed=seed, speeds=speeds, tma_speed=tma).blocked
    return blocked


# ---- the tests -----------------------------------------------------------------------------------------------

def test_the_model_reads_the_kernels_synchronisation_lines():
    text = kernel_text()
    for name, lines in SYNC_LINES.items():
        assert sync_lines(text, name) == lines, (name, sync_lines(text, name))
    src = " ".join(_strip(text).split())
    for line in SHAPE_LINES:
        assert line in src, line
    # the ring of the 128-wide kernels is 3 deep, D = 64's 2: the model plays both (and the other two pairs)
    assert "static constexpr int N = HD == 128 ? 3 : 2;" in src and "constexpr int STAGES = Stages<HD>::N;" in src


def test_the_traces_are_what_the_kernel_says():
    text = kernel_text()
    S, B = 3, 3

    def sync(actor, n_iter=5):
        return [(op[0], op[1], *op[2:]) for op in trace(text, actor, n_iter, S, 128)
                if op[0] in ("wait", "arrive")]
    prod = sync(PRODUCER)
    assert prod[0] == ("arrive", ("fullKV", 0), 2 * 2 * 16384, None)
    for it in range(5):
        st, ph = it % S, (it // S) & 1
        assert prod[1 + 3 * it:4 + 3 * it] == [("wait", ("empty", st), ph ^ 1, it),
                                               ("arrive", ("fullQ", st), 2 * 8192 + 256, it),
                                               ("arrive", ("fulldO", st), 2 * 8192 + 256, it)]
    loads = [op for op in trace(text, PRODUCER, 5, S, 128) if op[0] == "load"]
    assert len(loads) == 4 + 5 * 6 and loads[4][3] == ("sQ", 0) and loads[-1][3] == ("sDr", 4 % S)

    def consumer(c, n_iter=5):
        out = [("wait", ("fullKV", 0), 0, None)] + ([("wait", ("kick", 0), 0, None)] if c else [])
        for it in range(n_iter):
            if it > 0:
                j = it - 1
                out += [("wait", ("dsReady", j % B), (j // B) & 1, j), ("arrive", ("dsFree", j % B), 0, j)]
            st, ph = it % S, (it // S) & 1
            out += [("wait", ("fullQ", st), ph, it), ("wait", ("fulldO", st), ph, it)]
            if it >= B:
                out += [("wait", ("dsFree", it % B), (it // B - 1) & 1, it)]
            out += [("arrive", ("dsReady", it % B), 0, it), ("arrive", ("empty", st), 0, it)]
            if it == 0 and c == 0:
                out += [("arrive", ("kick", 0), 0, 0)]
        j = n_iter - 1
        return out + [("wait", ("dsReady", j % B), (j // B) & 1, j), ("arrive", ("dsFree", j % B), 0, j)]
    for c in range(2):
        for w in range(4):
            assert sync((c, w)) == consumer(c), (c, w)
    # the data accesses of a consumer warp's first block: S^T reads K and Q, dP^T V and dO, L2 / Dr generic reads,
    # the dS^T stores into buffer 0, and the dV / dK group reads dO and Q until the wait before the empty arrival
    ops = trace(text, (1, 2), 1, S, 128)
    data = [op for op in ops if op[0] in ("rbegin", "rend", "read", "write")]
    kinds = [(op[0], op[1][0]) for i, op in enumerate(data) if i == 0 or op != data[i - 1]]
    assert kinds == [("rbegin", "sK"), ("rbegin", "sQ"), ("rbegin", "sV"), ("rbegin", "sdO"), ("rend", "sK"),
                     ("rend", "sQ"), ("read", "sL2"), ("rend", "sV"), ("rend", "sdO"), ("read", "sDr"),
                     ("rbegin", "sdO"), ("rbegin", "sQ"), ("write", "sdS"), ("rend", "sdO"), ("rend", "sQ"),
                     ("rbegin", "sdS"), ("rbegin", "sK"), ("rend", "sdS"), ("rend", "sK")], kinds
    i_free = ops.index(("arrive", Bar(("dsFree", 0)), 0, 0))
    assert ops.index(("rend", Region(("sdS", 0)), 0)) < i_free  # the dQ product is done before the release


@pytest.mark.parametrize("n_iter", range(1, 13))
def test_the_decoupled_kernel_never_hangs_or_races(n_iter):
    blocked = play_all(kernel_text(), n_iters=[n_iter])
    if n_iter >= 2:  # the schedules do make the consumers wait for each other, and for the producer
        assert blocked["dsReady"] and blocked["fullQ"] and blocked["kick"], blocked
    if n_iter >= 4:
        assert blocked["empty"], blocked
    # a finding: the dsFree waits never wait. Consumer c writes block it's dS^T only after its dQ of block
    # it - 1, which waited (dsReady) for the other consumer's dS^T of block it - 1; the other consumer stored
    # those after its own dQ of block it - 2 had completed (wgmma_wait<0>). So both dQ products of every block up
    # to it - 2 are done whenever a buffer is rewritten: with 2 or more buffers, the buffer of block it - 3
    # (or it - 2) is always free already, and the consumers can never run more than about a block apart.
    assert not blocked["dsFree"], blocked


def test_two_ds_buffers_or_no_ds_free_wait_are_as_safe():
    # the finding above, played: DS_BUFS = 2, and DS_BUFS = 3 without the dsFree wait, pass every check;
    # with one buffer the dsFree wait is what makes it safe (and it passes with it)
    variants = [_edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 2;"),
                _edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 1;"),
                _edit("if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);", ""),
                _chain(_edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 2;"),
                       _edit("if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);", ""))]
    for edit in variants:
        blocked = play_all(edit(kernel_text()), n_iters=range(1, 8), configs=((128, 3), (64, 2)),
                           schedules=SCHEDULES[:8])
        assert not blocked["dsFree"] or edit is variants[1], blocked


def _edit(old: str, new: str, count: int = 1):
    def apply(text: str) -> str:
        assert text.count(old) == count, old
        return text.replace(old, new)
    return apply


def _move(line: str, before: str):
    """The text with `line` (a whole line) moved to just before the line containing `before`."""
    def apply(text: str) -> str:
        assert text.count(line + "\n") == 1 and text.count(before) == 1, (line, before)
        text = text.replace(line + "\n", "")
        i = text.rindex("\n", 0, text.index(before)) + 1
        return text[:i] + line + "\n" + text[i:]
    return apply


def _chain(*edits):
    def apply(text):
        for e in edits:
            text = e(text)
        return text
    return apply


BREAKAGES = {
    # 2 dS^T buffers in shared memory, the code (indices, barriers, the dsFree wait) still written for 3
    "two_physical_buffers": (_chain(_edit("uint8_t* buf = sdS + b * DS_BYTES;", "uint8_t* buf = sdS + (b % 2) * DS_BYTES;"),
                                    _edit("desc_mn(sdS + b * DS_BYTES + key_row0 * 128, 0)",
                                          "desc_mn(sdS + (b % 2) * DS_BYTES + key_row0 * 128, 0)")),
                             "holds block|while reads|before every consumer warp|before all 8"),
    # DS_BUFS = 2, the wait before a rewrite still for 3 buffers
    "two_buffers_free_wait_for_three": (_chain(
        _edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 2;"),
        _edit("if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);",
              "if (it >= 3) mbar_wait(&dsFree[b], (it / 3 - 1) & 1);")),
        "hang"),  # the dsFree[it % 2] waits of blocks 3, 4, .. wait for parities of a 3-buffer count
    "ds_free_parity_off_by_one": (_edit("(it / DS_BUFS - 1) & 1", "(it / DS_BUFS) & 1"), "returned|hang"),
    "ds_ready_parity_off_by_one": (_edit("mbar_wait(&dsReady[b], (it / DS_BUFS) & 1);",
                                         "mbar_wait(&dsReady[b], (it / DS_BUFS + 1) & 1);"), "returned|hang"),
    "no_kick_arrival": (_edit("      if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);\n", ""), "hang"),
    "kick_count_8": (_edit("mbar_init(kick, 4);", "mbar_init(kick, 8);"), "hang"),
    "kick_every_block": (_edit("if (it == 0 && c == 0 && t % 32 == 0) mbar_arrive(kick);",
                               "if (c == 0 && t % 32 == 0) mbar_arrive(kick);"), "over-arrival|partial"),
    # one dS^T buffer (where the dsFree wait is needed): without it, or with the release before the dQ wgmma's end
    "one_buffer_no_free_wait": (_chain(_edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 1;"),
                                       _edit("if (it >= DS_BUFS) mbar_wait(&dsFree[b], (it / DS_BUFS - 1) & 1);", "")),
                                "while reads|before every consumer warp"),
    "one_buffer_free_before_the_dq_wait": (_chain(_edit("constexpr int DS_BUFS = 3;", "constexpr int DS_BUFS = 1;"),
                                                  _move("  if (t % 32 == 0) mbar_arrive(&dsFree[it % DS_BUFS]);",
                                                        "  wgmma_wait<0>();\n  wgmma_fence_regs(dq);")),
                                           "while reads"),
    "empty_arrival_per_warpgroup": (_edit("if (lane == 0) mbar_arrive(&empty[st]);",
                                          "if (t == 0) mbar_arrive(&empty[st]);"), "hang|partial"),
    "ds_ready_arrival_per_warpgroup": (_edit("if (lane == 0) mbar_arrive(&dsReady[b]);",
                                             "if (t == 0) mbar_arrive(&dsReady[b]);"), "hang"),
    "producer_empty_parity": (_edit("mbar_wait(&empty[st], ph ^ 1);", "mbar_wait(&empty[st], ph);"), "hang"),
    "ds_ready_before_the_stores": (_move("  if (lane == 0) mbar_arrive(&dsReady[b]);  // this warp's rows of block it are in",
                                         "uint8_t* buf = sdS + b * DS_BYTES;"), "before all 8|after a read"),
    "empty_before_the_dv_dk_wait": (_move("  if (lane == 0) mbar_arrive(&empty[st]);  // this warp is done with Q, dO, L2, Dr of the stage",
                                          "wgmma_wait<0>();  // dV / dK of this block"), "while reads"),
    "no_last_dq": (_edit("    consumer_dq<HD>(n_iter - 1, q0_prev, c, t, sK, sdS, dsReady, dsFree, dq_prev, D);", ""),
                   "not read by every|partial"),
    "short_expect_tx": (_edit("mbar_arrive_expect_tx(&fulldO[st], QT + BM * 4);",
                              "mbar_arrive_expect_tx(&fulldO[st], QT);"), "more bytes|before its load landed"),
}


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_the_model_catches_a_broken_kernel(name):
    edit, phrase = BREAKAGES[name]
    text = edit(kernel_text())
    assert text != kernel_text()
    with pytest.raises(AssertionError, match=phrase):
        play_all(text, n_iters=range(1, 8), configs=((128, 3), (64, 2)))
