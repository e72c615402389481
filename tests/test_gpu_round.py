"""bench/gpu_round.sh drives the GPU measurements of a round: every step it names must call a script that
exists with options that script accepts (a typo there would cost a whole device call to find)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROUND = (ROOT / "bench" / "gpu_round.sh").read_text()


def _steps() -> dict[str, str]:
    body = ROUND[ROUND.index("case $name in"):ROUND.index("esac")]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s{4}([a-z-]+)\)(.*?);;", body, re.S | re.M)}


def test_every_step_has_a_budget_and_a_documented_line():
    budgets = set(re.findall(r"\[([a-z-]+)\]=\d+", ROUND))
    steps = set(_steps())
    assert steps == budgets, (steps ^ budgets)
    for name in steps:
        assert re.search(rf"^#\s+{re.escape(name)} \(\d+\)", ROUND, re.M), f"{name} is not in the header"


def _calls() -> list[tuple[str, str, str]]:
    """(step, script, the text of its options: up to the next command of the step)."""
    out = []
    for name, cmd in _steps().items():
        for part in cmd.split("python3 ")[1:]:
            script, _, opts = part.partition(" ")
            if script.startswith("bench/") and script.endswith(".py"):
                out.append((name, script, opts.split("\n      done")[0]))
    return out


CALLS = _calls()


@pytest.mark.parametrize("name, script, opts", CALLS, ids=[c[0] + ":" + Path(c[1]).stem for c in CALLS])
def test_each_python_step_calls_a_script_with_options_it_accepts(name, script, opts):
    assert (ROOT / script).is_file(), script
    helptext = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
    assert helptext.returncode == 0, helptext.stderr[-2000:]
    for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", opts):
        assert flag in helptext.stdout, f"{script} does not take {flag}"


def test_the_shell_steps_call_scripts_that_exist():
    for name, cmd in _steps().items():
        for script in re.findall(r"bash (bench/\S+\.sh)", cmd):
            assert (ROOT / script).is_file(), (name, script)
        for path in re.findall(r"(tests/\S+\.py)", cmd):
            assert (ROOT / path).is_file(), (name, path)


def _fake_round(tmp_path: Path, *args: str) -> dict[str, list[float]]:
    """gpu_round.sh with every step replaced by one that notes its GPU and sleeps: {step: [gpu, start, end]}."""
    body = ROUND[ROUND.index("case $name in"):ROUND.index("esac") + len("esac")]
    fake = ('case $name in *) echo "gpu=${CUDA_VISIBLE_DEVICES:-none} step=$name tag=${tag:-none} dir=$d '
            'start=$(date +%s.%N)"; sleep 1; echo "end=$(date +%s.%N)" ;; esac')
    script = tmp_path / "round.sh"
    assert ROUND.count("source bench/gpu_env.sh || exit 1") == 1
    script.write_text(ROUND.replace(body, fake).replace("source bench/gpu_env.sh || exit 1", ":"))  # no wheels here
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(script), *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OUT": str(out),
                            "PYTHONPATH": "", "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    seen = {}
    for log in out.glob("*.log"):
        text = log.read_text()
        gpu = re.search(r"gpu=(\S+)", text).group(1)
        seen[log.stem] = [gpu, float(re.search(r"start=(\S+)", text).group(1)), float(re.search(r"end=(\S+)", text).group(1)),
                          re.search(r"step=(\S+) tag=(\S+) dir=(\S+)", text).groups()]
        assert (out / f"{log.stem}.tar.gz").is_file()
    assert len((out / "steps.txt").read_text().splitlines()) == len(seen)
    return seen


def test_the_steps_of_one_argument_run_side_by_side_each_on_its_gpu(tmp_path):
    seen = _fake_round(tmp_path, "bwd-variants:20@0 attn-sweep:20@1")
    assert seen["bwd-variants"][0] == "0" and seen["attn-sweep"][0] == "1"
    assert max(s[1] for s in seen.values()) < min(s[2] for s in seen.values())  # they overlapped


def test_separate_arguments_run_one_after_the_other_on_every_gpu(tmp_path):
    seen = _fake_round(tmp_path, "bwd:20", "gemm-sweep:20")
    assert seen["bwd"][0] == "none" and seen["gemm-sweep"][0] == "none"
    assert seen["bwd"][2] <= seen["gemm-sweep"][1]


def test_a_tagged_step_runs_beside_its_untagged_twin_with_its_own_settings_and_folder(tmp_path):
    """bwd-variants.b: the same step, its settings from BWD_VARIANTS_b (the tag), its own log, folder and archive."""
    seen = _fake_round(tmp_path, "bwd-variants:20@0 bwd-variants.b:20@1")
    assert seen["bwd-variants"][3][:2] == ("bwd-variants", "none") and seen["bwd-variants.b"][3][:2] == ("bwd-variants", "_b")
    assert seen["bwd-variants.b"][3][2].endswith("/bwd-variants.b") and seen["bwd-variants.b"][0] == "1"
    assert max(v[1] for v in seen.values()) < min(v[2] for v in seen.values())


def test_round_one_tar_brings_everything_back_in_one_file(tmp_path):
    """ROUND_ONE_TAR=1: after the steps, all of $OUT (each step's log and archive, steps.txt) is one round.tar.gz."""
    import tarfile

    body = ROUND[ROUND.index("case $name in"):ROUND.index("esac") + len("esac")]
    script = tmp_path / "round.sh"
    script.write_text(ROUND.replace(body, 'case $name in *) echo "ran $name" > "$d/out.txt" ;; esac')
                      .replace("source bench/gpu_env.sh || exit 1", ":"))
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(script), "bwd:20", "attn-sweep:20"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "OUT": str(out),
                                        "PYTHONPATH": "", "HOME": str(tmp_path), "ROUND_ONE_TAR": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p.name for p in out.iterdir()] == ["round.tar.gz"]
    with tarfile.open(out / "round.tar.gz") as tar:
        names = {n.lstrip("./") for n in tar.getnames()}
    assert {"steps.txt", "bwd.log", "bwd.tar.gz", "attn-sweep.log", "attn-sweep.tar.gz", "gpu.txt"} <= names
