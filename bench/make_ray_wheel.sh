#!/usr/bin/env bash
# Put a slim Ray wheel (and the packages Ray needs that the GPU image lacks) into .whl-ray/, for the device tool's
# 64 MiB carry limit: Ray's wheel is ~79 MB, of which 32 MB is the Java jar and more is RLlib, Serve, Data, Train,
# Tune, LLM and the dashboard's web build, none of which `--backend ray` uses (~39 MB left).
# Usage (repository root, CPU machine):  bash bench/make_ray_wheel.sh      (PYVER=3.12 RAY=2.60.0 DEST=.whl-ray)
set -euo pipefail
PYVER=${PYVER:-3.12}; RAY=${RAY:-2.60.0}; DEST=${DEST:-.whl-ray}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp "${PLAT[@]}" \
  -d "$TMP" "ray==$RAY" jsonschema jsonschema-specifications referencing rpds-py
mkdir -p "$DEST"; rm -f "$DEST"/ray-*.whl
WHEEL=$(ls "$TMP"/ray-*.whl)
# Copy entry by entry (keeping each file's mode: raylet and gcs_server must stay executable), minus the unused parts.
python3 - "$WHEEL" "$DEST/$(basename "$WHEEL")" <<'PY'
import sys, zipfile
DROP = ("ray/jars/", "ray/rllib/", "ray/serve/", "ray/data/", "ray/train/", "ray/tune/", "ray/llm/", "ray/dashboard/client/build/")
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist():
        if not info.filename.startswith(DROP):
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
PY
for w in "$TMP"/*.whl; do [ "$w" = "$WHEEL" ] || cp "$w" "$DEST"/; done
du -ch "$DEST"/ray-*.whl "$DEST"/jsonschema*.whl "$DEST"/referencing*.whl "$DEST"/rpds*.whl | tail -1
