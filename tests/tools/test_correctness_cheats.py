"""Outputs a cheating kernel could produce, built on the CPU and judged by the harness's own rule
(correctness.compare with the registry's tolerances): each must fail, while the honest bf16 arithmetic (fp32
accumulation, P and dS rounded to bf16) keeps passing with margin."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ptxbench.tools.gpu.correctness import compare  # noqa: E402
from ptxbench.workloads import inputs as inputs_mod  # noqa: E402
from ptxbench.workloads.inputs import make_inputs  # noqa: E402
from ptxbench.workloads.references import run_reference  # noqa: E402
from ptxbench.workloads.registry import get_workload  # noqa: E402
from softmax_mirror import masked_scores, softmax_from, verdicts  # noqa: E402

BF = torch.bfloat16


def _fp8(x: torch.Tensor, dim: int) -> torch.Tensor:
    """x through scaled fp8 e4m3 (one scale per slice along `dim`), as a scaled fp8 GEMM's operand."""
    sc = 448.0 / x.abs().amax(dim=dim, keepdim=True).clamp_min(1e-30)
    return (x * sc).to(torch.float8_e4m3fn).float() / sc


def _bwd_case(s: int = 2048, d: int = 64, seed: int = 3):
    wl = get_workload("mha_bwd_d64")
    wl.symbols.update({"B": 1, "H": 1, "S": s, "D": d, "scale": 1 / math.sqrt(d)})
    inp = make_inputs(wl, seed, "normal", "cpu")
    return wl, inp, run_reference(wl, inp)


def _bwd(wl, inp, fp8_rows: float = 0.0) -> dict[str, torch.Tensor]:
    """FlashAttention's backward in the kernel's precisions; dQ = dS K and dK = dS^T Q in scaled fp8 for the last
    `fp8_rows` of their rows (a per-tile switch: 2 of the 5 GEMMs at twice the wgmma rate there)."""
    q, k, v, o, do, lse = (inp[n].float() for n in ("Q", "K", "V", "O", "dO", "LSE"))
    scale = wl.symbols["scale"]
    s = q @ k.transpose(-1, -2) * scale
    if wl.causal:
        s = s.masked_fill(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool).triu(1), float("-inf"))
    p = torch.exp(s - lse[..., None])
    dv = p.to(BF).float().transpose(-1, -2) @ do
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    dq, dk = (ds.to(BF).float() @ k) * scale, (ds.to(BF).float().transpose(-1, -2) @ q) * scale
    if fp8_rows:
        c = int(q.shape[-2] * (1 - fp8_rows))
        dq[..., c:, :] = ((_fp8(ds, -1) @ _fp8(k, -2)) * scale)[..., c:, :]
        dk[..., c:, :] = ((_fp8(ds, -2).transpose(-1, -2) @ _fp8(q, -2)) * scale)[..., c:, :]
    return {"dQ": dq.to(BF), "dK": dk.to(BF), "dV": dv.to(BF)}


def test_backward_with_half_its_dq_dk_tiles_in_fp8_fails():
    """The backward's relative Frobenius bound was 3e-2, 10x the honest error: dQ and dK half in fp8 (2.6e-2 at
    S = 4096, every element inside the element rule since the gradients are ~0.03) passed."""
    wl, inp, ref = _bwd_case()
    honest = verdicts(_bwd(wl, inp), ref, wl.tolerance)
    assert all(s.passed and s.rel_fro_err < 3e-3 for s in honest.values()), honest
    cheat = verdicts(_bwd(wl, inp, fp8_rows=0.5), ref, wl.tolerance)
    for n in ("dQ", "dK"):
        assert cheat[n].frac_matched == 1.0  # the element rule alone lets it through
        assert 1e-2 < cheat[n].rel_fro_err < 3e-2 and not cheat[n].passed, cheat[n]


def _fwd_case(s: int = 2048, d: int = 64, causal: bool = True, seed: int = 5):
    wl = get_workload("mha_fwd_d64_causal" if causal else "mha_fwd_d64")
    wl.symbols.update({"B": 1, "H": 4, "S": s, "D": d, "scale": 1 / math.sqrt(d)})  # one offset, one spiked, two plain
    inp = make_inputs(wl, seed, "normal", "cpu")
    return wl, inp, run_reference(wl, inp)


def _fwd(wl, inp, fp8_from: int | None = None) -> dict[str, torch.Tensor]:
    """The forward in the kernel's precisions (P rounded to bf16 for P V); query rows from `fp8_from` on of the plain
    heads take P and V through scaled fp8 e4m3 (P V at twice the wgmma rate on those tiles)."""
    q, k, v = (inp[n].float() for n in ("Q", "K", "V"))
    s = q @ k.transpose(-1, -2) * wl.symbols["scale"]
    if wl.causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    m = s.amax(-1, keepdim=True)
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p.to(BF).float() @ v) / l
    if fp8_from is not None:  # on the plain heads (the offset and spiked heads: their scores take fp8's range)
        plain = ~_offset(inp["Q"]) & ~_spiked(inp["Q"], inp["K"])
        o8 = (_fp8(p, -1) @ _fp8(v, -2)) / l
        o[plain, fp8_from:, :] = o8[plain, fp8_from:, :]
    return {"O": o.to(BF), "LSE": (m + l.log()).squeeze(-1)}


def test_causal_forward_with_its_late_rows_in_fp8_fails_on_their_blocks():
    """A causal output's norm is its first rows' (|O| ~ 1 there, ~0.03 at the end), so the whole tensor's bound let the
    last quarter of the rows (44% of the causal work) take P V in fp8: 7.8e-3 < 1e-2 at S = 4096. Their blocks' own
    errors (3.7e-2) fail it."""
    wl, inp, ref = _fwd_case()
    honest = verdicts(_fwd(wl, inp), ref, wl.tolerance)
    assert all(s.passed for s in honest.values()), honest
    cheat = verdicts(_fwd(wl, inp, fp8_from=3 * 2048 // 4), ref, wl.tolerance)["O"]
    assert cheat.frac_matched == 1.0 and cheat.rel_fro_err < wl.tolerance.max_rel_fro  # the old rule passed it
    assert not cheat.passed and "every block of 8192 elements" in cheat.note, cheat


def test_non_causal_forward_with_a_few_tiles_in_fp8_fails():
    """Without causality too: 1 query tile in 32 through fp8 stays under the whole tensor's bound (the error spreads
    over the other 31), not under its own block's."""
    wl, inp, ref = _fwd_case(causal=False)
    cheat = verdicts(_fwd(wl, inp, fp8_from=2048 - 64), ref, wl.tolerance)["O"]
    assert cheat.rel_fro_err < wl.tolerance.max_rel_fro and not cheat.passed, cheat


@pytest.mark.parametrize("causal", [False, True])
def test_honest_backward_passes_the_block_rule_with_margin(causal):
    from ptxbench.tools.gpu.correctness import block_errors

    wl = get_workload("mha_bwd_d64_causal" if causal else "mha_bwd_d64")
    wl.symbols.update({"B": 1, "H": 2, "S": 1024})
    inp = make_inputs(wl, 9, "normal", "cpu")
    ref = run_reference(wl, inp)
    out = _bwd(wl, inp)
    for n, r in ref.items():
        s = compare(out[n], r, wl.tolerance, trial=0, tensor=n)
        worst, _ = block_errors(out[n].float() - r, r)
        assert s.passed and worst < wl.tolerance.max_rel_fro / 2.5, (n, worst, s)


def test_block_rule_calibrated_by_the_library():
    """Where the library calibrates, a block is held to max(max_rel_fro, 2 x the library's worst block)."""
    from ptxbench.tools.gpu.correctness import BLOCK_ELEMENTS, library_error
    from ptxbench.workloads.schema import Tolerance

    tol = Tolerance(atol=1e-2, rtol=1e-2, max_rel_fro=1e-2)
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4 * BLOCK_ELEMENTS, generator=g)
    lib_out = ref * (1 + 0.002 * torch.randn(ref.shape, generator=g))
    lib_out[5] = ref[5] + 0.05  # misses the element rule: the library calibrates
    lib_out[BLOCK_ELEMENTS:2 * BLOCK_ELEMENTS] *= 1.015  # and its own block 1 is 1.5e-2 off
    lib = library_error(lib_out, ref, tol, "cudnn_sdpa")
    assert not lib.passes_element_rule and 0.014 < lib.worst_block_rel_fro < 0.016
    same = lib_out.clone()
    assert compare(same, ref, tol, trial=0, tensor="dQ", library=lib).passed  # as accurate as the library
    worse = ref.clone()
    worse[3 * BLOCK_ELEMENTS:] *= 1.04  # 4e-2 > 2 x 1.5e-2 on block 3 (2e-2 over the tensor)
    s = compare(worse, ref, tol, trial=0, tensor="dQ", library=lib)
    assert not s.passed and s.rule == "library_x2" and "block 3" in s.note, s


def _allowance_used(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per head ([B, H, S, D] -> [H]), the worst element's error over the element rule's allowance max(1e-2, 1e-2 |ref|)."""
    return ((out.float() - ref).abs() / torch.clamp(1e-2 * ref.abs(), min=1e-2)).amax(dim=(0, 2, 3))


def _offset(q: torch.Tensor) -> torch.Tensor:
    """[B, H] (or [H]): which query heads make_inputs offset, by their rows' norms (hundreds along one direction on some
    rows, against sqrt(D) <= 11.3 of a plain row): the offset lies along a random direction, so no single coordinate
    tells them."""
    return (q.float().norm(dim=-1) > 100).any(-1)


def _spiked(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """[B, H] (or [H]): which query heads read a KV head with a spike key (hundreds long against sqrt(D))."""
    return (k.float().norm(dim=-1) > 100).any(-1).repeat_interleave(q.shape[-3] // k.shape[-3], -1)


def _softmax_forward(wl, inp, mode: str, headroom: float = 0.0) -> dict[str, torch.Tensor]:
    q, k, v = (inp[n].float() for n in ("Q", "K", "V"))
    s = masked_scores(q, k, wl.symbols["scale"], wl.causal)
    m = {"honest": s.amax(-1, keepdim=True), "no max": torch.zeros_like(s[..., :1]),
         "first tile": s[..., :64].amax(-1, keepdim=True)}[mode] + headroom
    return softmax_from(s, m, v)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode", ["no max", "first tile"])
def test_forward_without_its_running_max_fails(causal, mode):
    """Scores ~N(0, 1) (row maxima ~5) let a softmax with no max, or the first key tile's max and no rescale, be exact;
    make_inputs' offset heads (every score of a row raised past 100, and one late key another 100 above the rest on a
    quarter of their rows) overflow it, while the honest forward passes them."""
    wl = get_workload("mha_fwd_d64_causal" if causal else "mha_fwd_d64")
    wl.symbols.update({"B": 1, "H": 4, "S": 1024})
    inp = make_inputs(wl, 4, "normal", "cpu")
    ref = run_reference(wl, inp)
    scores = sorted(float((inp["Q"][0, h].float() @ inp["K"][0, h].float().T).abs().max()) * wl.symbols["scale"]
                    for h in range(4))
    assert scores[0] < 10 and scores[1] < 10 and 100 < scores[2] < 150 < scores[3], scores  # plain x2, offset, spiked
    honest = verdicts(_softmax_forward(wl, inp, "honest"), ref, wl.tolerance)
    assert all(s.passed for s in honest.values()), honest
    cheat = verdicts(_softmax_forward(wl, inp, mode), ref, wl.tolerance)
    assert not cheat["O"].passed and cheat["O"].n_nan + cheat["O"].n_inf > 0, cheat["O"]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("headroom", [20.0, 50.0, 80.0])
def test_a_never_moved_max_with_headroom_fails(causal, headroom):
    """The first key tile's max plus a headroom C, never moved (exp(s - m - C), no rescale: no running max to keep)
    passed every check with the spike at 100 for C from 20 to 84. At 200 the spiked rows overflow for every C below
    where the plain heads' P underflows (about 85)."""
    wl = get_workload("mha_fwd_d64_causal" if causal else "mha_fwd_d64")
    wl.symbols.update({"B": 1, "H": 2, "S": 1024})
    inp = make_inputs(wl, 4, "normal", "cpu")
    ref = run_reference(wl, inp)
    cheat = verdicts(_softmax_forward(wl, inp, "first tile", headroom), ref, wl.tolerance)
    assert not cheat["O"].passed and cheat["O"].n_nan + cheat["O"].n_inf > 0, cheat["O"]


def _bounded_forward(wl, inp, rows: str) -> dict[str, torch.Tensor]:
    """The softmax with its max skipped where a bound says exp cannot overflow: |q| |k|max scale < 80, from each row's
    own |q| (`rows="own"`: a bound on every score of the row), or from the first row of each 64-row query tile taken for
    the whole tile (`rows="tile's first"`)."""
    q, k, v = (inp[n].float() for n in ("Q", "K", "V"))
    s = masked_scores(q, k, wl.symbols["scale"], wl.causal)
    qn = q.norm(dim=-1)
    if rows != "own":
        qn = qn.unflatten(-1, (-1, 64))[..., :1].expand(*qn.shape[:-1], qn.shape[-1] // 64, 64).flatten(-2)
    bound = qn * k.norm(dim=-1).amax(-1, keepdim=True) * wl.symbols["scale"]
    return softmax_from(s, torch.where(bound[..., None] < 80, 0.0, s.amax(-1, keepdim=True)), v)


@pytest.mark.parametrize("causal", [False, True])
def test_a_max_skipped_by_each_rows_own_bound_passes_and_by_a_tiles_first_row_fails(causal):
    """What tells an offset row is its norm. A bound from each row's own |q| is sound (it bounds every score of the
    row) and passes; one row's norm taken for its tile (or head) is not: only about half of an offset head's rows carry
    the offset, drawn row by row, so the rows it did not read overflow."""
    wl = get_workload("mha_fwd_d64_causal" if causal else "mha_fwd_d64")
    wl.symbols.update({"B": 1, "H": 4, "S": 1024})
    inp = make_inputs(wl, 4, "normal", "cpu")
    ref = run_reference(wl, inp)
    sound = verdicts(_bounded_forward(wl, inp, "own"), ref, wl.tolerance)
    assert all(st.passed for st in sound.values()), sound
    cheat = verdicts(_bounded_forward(wl, inp, "tile's first"), ref, wl.tolerance)["O"]
    assert not cheat.passed and cheat.n_nan + cheat.n_inf > 0, cheat


def _lazy_forward(q, k, v, scale: float, causal: bool, threshold: float = 8.0, bn: int = 128) -> torch.Tensor:
    """The reference kernel's softmax (attention_softmax.py rescale="lazy"): the running max moves only when a key
    tile's exceeds it by more than `threshold` (log2 units), P rounded to bf16 for P V, the row sum from fp32 P."""
    n = q.shape[-2]
    s = masked_scores(q, k, scale, causal)
    m = torch.full(q.shape[:-1], float("-inf"))
    l, o = torch.zeros(q.shape[:-1]), torch.zeros(q.shape)
    for j in range(0, n, bn):
        x = s[..., j:j + bn] / math.log(2)  # log2 units, as the kernel's exponentials
        new = torch.maximum(m, x.amax(-1))
        new = torch.where(new - m <= threshold, m, new)
        a = torch.nan_to_num(torch.exp2(m - new))  # -inf - -inf (a causal row's masked tile): nothing to rescale
        p = torch.nan_to_num(torch.exp2(x - new[..., None]))
        l = l * a + p.sum(-1)
        o = o * a[..., None] + p.to(BF).float() @ v[..., j:j + bn, :]
        m = new
    return (o / l[..., None]).to(BF)


@pytest.mark.parametrize("causal", [False, True])
def test_the_lazy_rescale_keeps_its_margin_on_the_offset_heads(causal):
    """Run 18's sharp heads (Q x 32) made rows near one-hot among a few keys: with the lazy rescale's max lagging, the
    dominant P is not 1, and its bf16 rounding put the honest reference over the element rule on about 6% of checked
    calls on the H100. On the offset heads its worst element uses the plain heads' share of the allowance."""
    wl = get_workload("mha_fwd_d128_causal" if causal else "mha_fwd_d128")
    wl.symbols.update({"B": 1, "H": 4, "S": 1024})
    inp = make_inputs(wl, 3, "normal", "cpu")
    ref = run_reference(wl, inp)["O"].float()
    q, k, v = (inp[n].float() for n in ("Q", "K", "V"))
    used = _allowance_used(_lazy_forward(q, k, v, wl.symbols["scale"], causal), ref)
    offset = _offset(inp["Q"][0])
    assert int(offset.sum()) == 1
    assert float(used[offset].max()) < 1.5 * float(used[~offset].max()) + 0.05, used
    assert float(used.max()) < 0.6, used
    # the same kernel on run 18's sharp head (its Q x 32) uses far more of the allowance at this size already
    sharp_q = q.clone()
    sharp_q[0, 0] = torch.randn(q.shape[-2:], generator=torch.Generator().manual_seed(1)).to(BF).float() * 32
    sharp_ref = run_reference(wl, {**inp, "Q": sharp_q.to(BF)})["O"].float()  # Q x 32 of bf16 values: exact in bf16
    sharp_used = float(_allowance_used(_lazy_forward(sharp_q, k, v, wl.symbols["scale"], causal), sharp_ref)[0])
    if causal:  # every head's worst element is on the first rows' few keys (0.37-0.66 over the seeds and shapes tried)
        assert sharp_used > float(used.max()) + 0.15, (sharp_used, used)
    else:
        assert sharp_used > 4 * float(used[offset].max()), (sharp_used, used)


def test_offset_rows_score_past_exps_range_and_spiked_rows_one_late_key():
    wl = get_workload("smoke_mha_fwd_d64_gqa_h4_kv2")
    wl.symbols.update({"B": 2, "H": 8, "HKV": 2, "S": 512})
    inp = make_inputs(wl, 7, "normal", "cpu")
    q, k = inp["Q"].float(), inp["K"].float()
    scale = wl.symbols["scale"]
    offset, spiked = _offset(q), _spiked(q, k)
    assert int(offset.sum()) == 4 and int(spiked.sum()) == 4 and not bool((offset & spiked).any())  # one group each
    for b, h in offset.nonzero().tolist():
        s = q[b, h] @ k[b, h // 4].T * scale
        lifted = s.median(-1).values > 50
        assert 0.1 < float(lifted.float().mean()) < 0.6
        first = int(lifted.float().argmax())  # none before the head's first offset row (drawn in the first half)
        assert first < 256 and 0.35 < float(lifted[first:].float().mean()) < 0.65
        # past exp's range, by more than the task says (inputs.OFFSET_FLOOR), or plain; spread ~1 either way
        assert float(s[lifted].min()) > inputs_mod.OFFSET_FLOOR and float(s[~lifted].abs().max()) < 10.0
        assert float(s.std(-1).max()) < 2.0
    for b, h in spiked.nonzero().tolist():
        s = q[b, h] @ k[b, h // 4].T * scale
        over = s - s.median(-1, keepdim=True).values  # each score over its row's middle: the spike far over it
        keys = (over > 150).any(0).nonzero().flatten().tolist()
        assert len(keys) == 1 and 512 // 4 <= keys[0] < 512 // 2, keys  # one key, in the second quarter
        rows = over[:, keys[0]] > 150
        assert 0.1 < float(rows.float().mean()) < 0.45
        rest = torch.cat([s[:, :keys[0]], s[:, keys[0] + 1:]], 1)
        assert float(rest.abs().max()) < 10.0  # every other score plain
        # the spiked rows' key: past exp's range (88.7) above the rest, past any headroom the plain heads leave (85)
        assert float((s[rows, keys[0]] - rest[rows].amax(-1)).min()) > 88.7 + 85
        assert float((s[~rows, keys[0]] - rest[~rows].amax(-1)).max()) < 5.0
    exact = make_inputs(wl, 7, "normal", "cpu")
    assert all(torch.equal(exact[n], inp[n]) for n in inp)  # the seed draws the same heads, rows and directions


def test_no_coordinate_gives_an_offset_or_spiked_head_away(monkeypatch):
    """Built along coordinates 0 and 1 (coordinate 0 the integer g on every row, coordinate 1 zero but on the spike), an
    offset head was told by one element, and a kernel could take the careful path there alone. Built along two random
    directions of the draw, each coordinate of its Q and K varies over the rows as a plain head's does
    (tests/workloads/test_offset_heads.py checks the construction itself)."""
    wl = get_workload("smoke_mha_fwd_d64_gqa_h4_kv2")
    wl.symbols.update({"B": 2, "H": 8, "HKV": 2, "S": 512})
    drawn = []
    directions = inputs_mod._directions
    monkeypatch.setattr(inputs_mod, "_directions", lambda d, gen: drawn.append(directions(d, gen)) or drawn[-1])
    inp = make_inputs(wl, 7, "normal", "cpu")
    q, k = inp["Q"].float(), inp["K"].float()
    assert len(drawn) == 1
    r0, r1 = drawn[0]
    assert abs(float(r0 @ r1)) < 1e-6 and abs(float(r0.norm()) - 1) < 1e-6 and abs(float(r1.norm()) - 1) < 1e-6
    assert float(r0.abs().max()) < 0.6 and float(r1.abs().max()) < 0.6  # not a coordinate
    for b in range(2):
        for kv in range(2):
            group = q[b, kv * 4:(kv + 1) * 4]
            # no coordinate constant over the rows, none zero: an offset or spiked head's spread is a plain head's
            assert float(group.std(-2).min()) > 0.5 and float(k[b, kv].std(-2).min()) > 0.5
            assert float(group.abs().amax(-2).min()) > 1.0 and float(k[b, kv].abs().amax(-2).min()) > 1.0
    # and no key's norm tells an offset head's keys (KEY_LIFT along r0: |k|^2 = D + 1) from a plain head's
    norms = k.norm(dim=-1) ** 2
    lifted = (k @ r0 - inputs_mod.KEY_LIFT).abs().amax(-1) < 0.05  # [B, HKV]: the offset heads' KV heads
    assert int(lifted.sum()) == 1
    typical = norms.median(-1).values
    assert float((typical[lifted] - typical[~lifted].mean()).abs().max()) < 3.0, typical


def test_an_lse_from_the_bf16_row_sum_passes_on_the_causal_first_rows():
    """A kernel may sum the bf16 P it multiplies into V (a column of ones in the P V product): l off by up to 2^-8, log l
    by up to 3.9e-3 where a causal row has few keys. That is honest, and LSE's atol (4e-3) keeps it."""
    wl = get_workload("mha_fwd_d64_causal")
    wl.symbols.update({"B": 1, "H": 4, "S": 1024})
    inp = make_inputs(wl, 6, "normal", "cpu")
    ref = run_reference(wl, inp)
    s = masked_scores(inp["Q"].float(), inp["K"].float(), wl.symbols["scale"], True)
    m = s.amax(-1, keepdim=True)
    lse = (m + torch.exp(s - m).to(BF).float().sum(-1, keepdim=True).log()).squeeze(-1)
    st = compare(lse, ref["LSE"], wl.tolerance.for_tensor("LSE"), trial=0, tensor="LSE")
    assert st.passed and 1e-3 < st.max_abs_err < 4e-3, st  # over a 1e-3 atol, inside 4e-3


def test_an_lse_rounded_to_bf16_fails_its_own_rule():
    """LSE is fp32 computed in fp32: under the forward's bf16 rule an offset head's LSE (about 110) could be off by 1.
    Rounded through bf16 (0.4%, about 0.4 there) it passed that rule; its own (4e-3 / 1e-4) fails it, and the honest
    LSE keeps a wide margin under it."""
    wl = get_workload("mha_fwd_d128")
    wl.symbols.update({"B": 1, "H": 4, "S": 512})
    inp = make_inputs(wl, 2, "normal", "cpu")
    ref = run_reference(wl, inp)
    out = _softmax_forward(wl, inp, "honest")
    honest = compare(out["LSE"], ref["LSE"], wl.tolerance.for_tensor("LSE"), trial=0, tensor="LSE")
    assert honest.passed and honest.max_abs_err < 1e-4, honest
    sloppy = out["LSE"].to(BF).float()
    assert compare(sloppy, ref["LSE"], wl.tolerance, trial=0, tensor="LSE").passed  # the old rule let it through
    s = compare(sloppy, ref["LSE"], wl.tolerance.for_tensor("LSE"), trial=0, tensor="LSE")
    assert not s.passed and s.max_abs_err > 0.1, s


def test_every_head_of_an_offset_or_spiked_gqa_group_keeps_the_plain_margin():
    """A spike key in a GQA group is read by every query head of it: each one's r1 component is removed, and only its
    spiked rows carry one (a plain one would raise the key by (q . r1) times the key's length: rows near one-hot between
    it and the rest, where the lazy kernel's mirror used 40-61% of the allowance). Every head keeps the plain margin."""
    wl = get_workload("mha_fwd_d128_gqa_h32_kv8")
    wl.symbols.update({"B": 1, "H": 16, "HKV": 4, "S": 1024})
    inp = make_inputs(wl, 0, "normal", "cpu")
    ref = run_reference(wl, inp)["O"].float()
    q = inp["Q"].float()
    k, v = (inp[n].float().repeat_interleave(4, 1) for n in ("K", "V"))
    used = _allowance_used(_lazy_forward(q, k, v, wl.symbols["scale"], False), ref)
    offset, spiked = _offset(q[0]), _spiked(q[0], inp["K"][0])
    assert int(offset.sum()) == 4 and int(spiked.sum()) == 4 and float(used.max()) < 0.2, (offset, spiked, used)
    for h in spiked.nonzero().flatten().tolist():  # the spike key is an ordinary one for the rows without a spike
        s = q[0, h] @ k[0, h].T * wl.symbols["scale"]
        over = s - s.median(-1, keepdim=True).values
        key = int(over.amax(0).argmax())
        rows = over[:, key] > 150
        assert 0.1 < float(rows.float().mean()) < 0.45 and float(over[~rows, key].max()) < 6.0
