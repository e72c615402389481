#!/usr/bin/env bash
# After bench/h200_bench.sh: unpack its run folder, score it, write the report into docs/, screenshot the pages
# in headless Chromium, and check that re-scoring the run folder gives the same numbers as the report's score.
# Usage (repository root, CPU machine):  bash bench/h200_report.sh <files_at>/h200-local.tar.gz [docs/bench-h200]
set -eu
TAR=$1; DOCS=${2:-docs/bench-h200}
NAME=$(tar tzf "$TAR" | head -1 | cut -d/ -f1)
mkdir -p runs && tar xzf "$TAR" -C runs
RUN=runs/$NAME
ptxbench() { python3 -c "from ptxbench.agent.cli.main import app; app()" "$@"; }
mkdir -p "$DOCS"
ptxbench report "$RUN" --out "$DOCS/$NAME"
ptxbench score "$RUN" > "$DOCS/$NAME/score.md"
ptxbench score "$RUN" --json > /tmp/rescore.json
python3 - "$DOCS/$NAME/score.json" /tmp/rescore.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for key in ("cells", "model_workload", "models", "trajectories"):
    assert a[key] == b[key], f"re-scoring differs in {key}"
print("re-scoring the run folder gives the same numbers:", len(a["trajectories"]), "trajectories,", len(a["cells"]), "cells")
PY
if command -v chromium >/dev/null; then
  OUTDIR=$(cd "$DOCS/$NAME" && pwd)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,3600 \
    --screenshot="$OUTDIR/screenshot-index.png" "file://$OUTDIR/index.html" 2>/dev/null
  FIRST=$(ls "$DOCS/$NAME/trajectories" | head -1)
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,2400 \
    --screenshot="$OUTDIR/screenshot-trajectory.png" "file://$OUTDIR/trajectories/$FIRST" 2>/dev/null
fi
python3 - "$DOCS/$NAME"/screenshot-*.png <<'PY' 2>/dev/null || true
import sys
from PIL import Image
for path in sys.argv[1:]:  # 64 colours: a third of the bytes, the same to read
    Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)
PY
du -sh "$DOCS/$NAME"; sed -n '/^### Leaderboard: best speedup over the library$/,/^$/p' "$DOCS/$NAME/summary.md" | head -3
grep -A6 '^| model |' "$DOCS/$NAME/summary.md" | head -8
