"""One line from a `ptxbench eval --json` result: status, speedup [interval], kernel and library medians, and the L2
flush the calls started from (a result recorded before the mode existed was timed under the written one).

    python3 bench/eval_line.py RESULT.json [LABEL]
"""
import json
import sys

r = json.load(open(sys.argv[1]))
label = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
t = r.get("timing") or {}
if not t:
    print(f"{label}: {r.get('status')} {str(r.get('message', ''))[:160]}")
else:
    lib = t["baselines"][t["primary_baseline"]]["median_ms"]
    lo, hi = t["speedup_ci"]
    print(f"{label}: {r['status']} {t['speedup']:.4f}x [{lo:.4f}, {hi:.4f}] kernel {t['candidate']['median_ms']:.4f} ms, "
          f"{t['primary_baseline']} {lib:.4f} ms, {t.get('l2_flush', 'write')} flush")
