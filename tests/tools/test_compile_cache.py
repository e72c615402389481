"""The compile cache's byte bound: least recently used entries go first, a hit counts as a use, an entry used within
the grace period stays, a removal racing a reader is a miss for it, and `ptxbench cache` shows and prunes."""
from __future__ import annotations

import os
import pathlib
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ptxbench.tools.cache as cache_module
from ptxbench.agent.cli.main import app
from ptxbench.tools.cache import ENV_MAX_BYTES, CompileCache, parse_size
from ptxbench.tools.results import CompileResult

OK = CompileResult(status="ok", arch="sm_90a")
KB = b"\0" * 1000


def key(i: int) -> str:
    return f"{i:02x}" * 32


def age(cache: CompileCache, k: str, seconds_ago: float) -> None:
    """Make every file of an entry (and its folder) look last used `seconds_ago`."""
    when = time.time() - seconds_ago
    d = cache.entry_dir(k)
    for p in [*d.iterdir(), d]:
        os.utime(p, (when, when))


def filled(root: Path, n: int, **kw) -> CompileCache:
    """n entries of about 1.3 KB, entry i last used 1000 - i hours ago (entry 0 the oldest)."""
    cache = CompileCache(root, max_bytes=None, **kw)
    for i in range(n):
        cache.put(key(i), OK, KB)
        age(cache, key(i), (1000 - i) * 3600)
    return cache


def present(cache: CompileCache, n: int) -> list[int]:
    return [i for i in range(n) if cache.entry_dir(key(i)).is_dir()]


def test_the_least_recently_used_entries_go_first(tmp_path):
    cache = filled(tmp_path, 6)
    one = cache.entries()[0].bytes
    cache.max_bytes = 4 * one
    pruned = cache.prune()
    assert present(cache, 6) == [3, 4, 5]  # under 90% of four entries: three are left
    assert (pruned.removed, pruned.entries, pruned.freed) == (3, 3, 3 * one)
    assert not [p for p in cache.entry_dir(key(0)).parent.parent.rglob(".evict-*")]  # nothing left aside


def test_a_hit_makes_an_entry_the_most_recently_used(tmp_path):
    cache = filled(tmp_path, 4, grace_s=0)  # recency alone keeps it
    before = time.time()
    assert cache.get(key(0)) is not None
    assert os.stat(cache.entry_dir(key(0)) / "result.json").st_mtime >= before - 1
    cache.max_bytes = 2 * cache.entries()[0].bytes
    cache.prune()
    assert present(cache, 4) == [0]


def test_an_entry_used_within_the_grace_period_is_never_removed(tmp_path):
    cache = filled(tmp_path, 4, grace_s=3600)
    cache.put(key(9), OK, KB)  # fresh: just written
    age(cache, key(3), 60)  # used a minute ago
    cache.max_bytes = 1
    pruned = cache.prune()
    assert present(cache, 10) == [3, 9] and pruned.in_use == 2
    assert cache.prune(target=0).removed == 0  # --clear keeps them too


def test_an_unbounded_cache_removes_nothing_and_never_walks(tmp_path, monkeypatch):
    cache = filled(tmp_path, 3)
    walks = []
    monkeypatch.setattr(CompileCache, "entries", lambda self: walks.append(1) or [])
    cache.put(key(7), OK, KB * 100)
    assert cache.prune().removed == 0 and walks == [1]  # the walk here is prune's own, none from the put
    assert present(cache, 8) == [0, 1, 2, 7]


@pytest.mark.parametrize("text, expected", [("", cache_module.DEFAULT_MAX_BYTES), ("0", None), ("none", None),
                                            ("None", None), ("123456", 123456), ("500M", 500 * 2**20),
                                            ("1.5GiB", int(1.5 * 2**30)), ("2g", 2 * 2**30)])
def test_the_bound_is_read_from_the_environment(tmp_path, monkeypatch, text, expected):
    monkeypatch.setenv(ENV_MAX_BYTES, text)
    assert CompileCache(tmp_path).max_bytes == expected


def test_a_bound_that_is_no_size_warns_and_keeps_the_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(ENV_MAX_BYTES, "5 gigs")
    assert CompileCache(tmp_path).max_bytes == cache_module.DEFAULT_MAX_BYTES
    assert "PTXBENCH_CACHE_MAX_BYTES='5 gigs' is not a size" in capsys.readouterr().err
    with pytest.raises(ValueError):
        parse_size("-1G")


def test_a_put_walks_only_when_due_and_then_keeps_the_bound(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_MAX_BYTES, "64K")
    monkeypatch.setattr(cache_module, "WALK_GAP_S", 0)
    cache = CompileCache(tmp_path, grace_s=0)
    walks = []
    real = CompileCache.entries
    monkeypatch.setattr(CompileCache, "entries", lambda self: walks.append(1) or real(self))
    for i in range(80):
        cache.put(key(i), OK, KB)
    one = real(cache)[0].bytes
    assert 10 < len(walks) < 40  # the first put (no walk yet), then once per twentieth of the bound written
    assert sum(e.bytes for e in real(cache)) <= 64 * 1024 + one
    assert 79 in present(cache, 80) and 0 not in present(cache, 80)


def test_a_get_racing_a_removal_is_a_miss(tmp_path, monkeypatch):
    """The pruner renames the entry aside just after the reader found its cubin: the reader's touch finds no
    result.json, so it is a miss, not a result naming a cubin that is gone."""
    cache = filled(tmp_path, 1)
    d = cache.entry_dir(key(0))
    real_is_file = pathlib.Path.is_file

    def removed_after(self, *a, **kw):
        found = real_is_file(self, *a, **kw)
        if self == d / "kernel.cubin" and d.exists():
            os.rename(d, d.with_name(".evict-x"))
        return found

    monkeypatch.setattr(pathlib.Path, "is_file", removed_after)
    assert cache.get(key(0)) is None


def test_an_entry_used_between_the_walk_and_the_removal_is_put_back(tmp_path):
    cache = filled(tmp_path, 2)
    stale = cache.entries()  # the walk sees both old
    assert cache.get(key(0)) is not None  # a reader uses one before the removal
    cache.max_bytes = 1
    cache.entries = lambda: stale
    cache.grace_s = 3600
    assert cache.prune().removed == 1
    assert present(cache, 2) == [0]


def test_a_hit_after_the_walk_keeps_its_cubin_in_place_through_the_removals(tmp_path, monkeypatch):
    """A prune's walk may be seconds old when its removals reach an entry (hundreds of rmtrees before it). An entry
    hit meanwhile was renamed aside and only then seen in use and put back: its cubin's path, which the hit had just
    handed to the evaluator for its GPU run, was gone in between. Now it is checked before the rename, and stays."""
    cache = filled(tmp_path, 2)
    stale = cache.entries()  # the walk sees both old
    hit = cache.get(key(0))  # a reader uses one before the removals reach it
    readable = []
    real_entry = cache_module._entry

    def looked_at(d):  # every look the removals take, before and after a rename: can the hit's cubin be read then?
        try:
            readable.append(Path(hit.cubin_path).read_bytes() == KB)
        except FileNotFoundError:
            readable.append(False)
        return real_entry(d)

    monkeypatch.setattr(cache_module, "_entry", looked_at)
    cache.max_bytes, cache.entries, cache.grace_s = 1, lambda: stale, 3600
    assert cache.prune().removed == 1 and present(cache, 2) == [0]
    assert readable and all(readable)


def test_two_pruners_and_vanished_entries_are_no_error(tmp_path):
    cache = filled(tmp_path, 6)
    stale = cache.entries()
    other = CompileCache(tmp_path, max_bytes=1)
    assert other.prune().removed == 6
    cache.max_bytes, cache.entries = 1, lambda: stale
    assert cache.prune().removed == 0  # every entry gone already: nothing removed, nothing raised


def test_readers_racing_removals_get_a_whole_entry_or_a_miss(tmp_path):
    """One thread puts the entry and removes it again (no grace), three read it meanwhile: no reader raises, and a
    reader that hits gets the whole result."""
    cache = CompileCache(tmp_path, max_bytes=None, grace_s=0)
    errors, seen, stop = [], [], threading.Event()

    def loop(step):
        try:
            while not stop.is_set():
                step()
        except Exception as exc:  # noqa: BLE001 - the test's point: anything raised is a failure
            errors.append(exc)

    def write_and_remove():
        cache.put(key(1), OK, KB)
        cache.prune(target=0)

    def read():
        hit = cache.get(key(1))
        seen.append(hit is not None and hit.status == "ok" and hit.cubin_path.endswith("kernel.cubin"))

    threads = [threading.Thread(target=loop, args=(s,))
               for s in (write_and_remove, read, read, read)]
    for t in threads:
        t.start()
    start = time.monotonic()  # a second at least; on a loaded machine, until readers have met both (20 s at most)
    while (ran := time.monotonic() - start) < 1 or (ran < 20 and not (True in seen and False in seen)):
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert errors == [] and True in seen and False in seen


def test_a_put_whose_folder_is_removed_while_it_writes_writes_again(tmp_path, monkeypatch):
    cache = CompileCache(tmp_path, max_bytes=None)
    real, failed = cache_module.atomic_write, []

    def renamed_aside_once(path, data):  # what replacing() meets when the folder goes between its mkdir and rename
        if not failed:
            failed.append(path)
            raise FileNotFoundError(2, "No such file or directory")
        return real(path, data)

    monkeypatch.setattr(cache_module, "atomic_write", renamed_aside_once)
    stored = cache.put(key(1), OK, KB)
    assert failed and Path(stored.cubin_path).read_bytes() == KB and cache.get(key(1)) is not None


def test_what_a_killed_removal_left_aside_is_swept(tmp_path, monkeypatch):
    cache = filled(tmp_path, 1)
    aside = cache.entry_dir(key(0)).with_name(".evict-left-1-0")
    os.rename(cache.entry_dir(key(0)), aside)
    cache.entries()
    assert aside.exists()  # a removal may be under way
    monkeypatch.setattr(cache_module, "ASIDE_AGE_S", -1)  # long ago (a ctime cannot be set back)
    cache.entries()
    assert not aside.exists()


# ---- ptxbench cache -----------------------------------------------------------------------------
def test_the_cache_command_shows_prunes_and_clears(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv(ENV_MAX_BYTES, "2K")
    cache = filled(tmp_path, 3)
    cache.put(key(8), OK, KB)  # fresh: in use
    shown = CliRunner().invoke(app, ["cache"])
    assert shown.exit_code == 0 and "4 entries" in shown.output and "bound 2 KiB" in shown.output, shown.output
    pruned = CliRunner().invoke(app, ["cache", "--prune"])
    assert pruned.exit_code == 0 and "removed 3 entries" in pruned.output, pruned.output
    cache.put(key(1), OK, KB)
    age(cache, key(1), 3 * 3600)
    cleared = CliRunner().invoke(app, ["cache", "--clear"])
    assert cleared.exit_code == 0 and "removed 1 entry" in cleared.output and "1 used in the last 30 min" in cleared.output
    assert present(cache, 9) == [8]


def test_the_cache_command_refuses_a_bound_that_is_no_size(tmp_path, monkeypatch):
    monkeypatch.setenv("PTXBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv(ENV_MAX_BYTES, "lots")
    result = CliRunner().invoke(app, ["cache"])
    assert result.exit_code == 2 and "PTXBENCH_CACHE_MAX_BYTES='lots' is not a size" in result.output


# ---- a cubin gone between the compile and the GPU run ---------------------------------------------
def _clear_after_compiles(monkeypatch, module, cache_dir: Path, times: int | None = None) -> list:
    """`module.compile_source` compiling into `cache_dir` and then removing the cubin's entry (as `ptxbench cache
    --clear` or a hand's rm would), the first `times` compiles (None: every one); the compiles made, in order."""
    import shutil

    real, compiles = module.compile_source, []

    def compiled_then_cleared(*args, **kwargs):
        comp = real(*args, cache=CompileCache(cache_dir), **kwargs)
        if times is None or len(compiles) < times:
            shutil.rmtree(Path(comp.cubin_path).parent)
        compiles.append(comp)
        return comp

    monkeypatch.setattr(module, "compile_source", compiled_then_cleared)
    return compiles


def test_a_cubin_cleared_after_the_compile_is_an_infra_error_not_the_kernels(tmp_path, monkeypatch):
    """`ptxbench cache --clear` or a hand's rm between an evaluation's compile and its GPU run: INFRA_ERROR naming
    the cache, no job sent, nothing the kernel is blamed for."""
    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.workloads.solutions.faults import load_corpus

    workload, corpus = load_corpus()
    _clear_after_compiles(monkeypatch, evaluate_module, tmp_path)
    r, workers = _evaluate_on_a_passing_fake_worker(workload, corpus["control_correct"]["source"])
    assert r.status == "INFRA_ERROR" and "gone from the compile cache" in r.message and str(tmp_path) not in r.message
    assert r.compile.status == "ok" and not workers[0].jobs


def test_a_cubin_read_while_a_prune_puts_its_entry_back_is_compiled_again_not_an_infra_error(tmp_path, monkeypatch):
    """A hit between a prune's last check and its rename: the entry goes aside, is seen in use and is renamed back,
    and the evaluator's read of the cubin fell in those microseconds. That was INFRA_ERROR (the step retried); now the
    evaluator compiles once more, a hit on the entry put back, and the kernel runs."""
    import ptxbench.tools.evaluate as evaluate_module
    from ptxbench.workloads.solutions.faults import load_corpus

    workload, corpus = load_corpus()
    real, compiles = evaluate_module.compile_source, []

    def hit_then_renamed_aside(*args, **kwargs):
        if compiles:  # the prune has seen the use meanwhile: the entry is back when the evaluator compiles again
            os.rename(aside_of(compiles[0]), Path(compiles[0].cubin_path).parent)
        comp = real(*args, cache=CompileCache(tmp_path), **kwargs)
        if not compiles:  # the prune's rename lands between this compile's hit and the evaluator's read
            os.rename(Path(comp.cubin_path).parent, aside_of(comp))
        compiles.append(comp)
        return comp

    def aside_of(comp):
        return Path(comp.cubin_path).parent.with_name(".evict-under-way")

    monkeypatch.setattr(evaluate_module, "compile_source", hit_then_renamed_aside)
    r, workers = _evaluate_on_a_passing_fake_worker(workload, corpus["control_correct"]["source"])
    assert r.status == "PASSED", r.message
    assert len(compiles) == 2 and compiles[1].cached and len(workers[0].jobs) == 1
    assert Path(r.compile.cubin_path).is_file() and not list(tmp_path.rglob(".evict-*"))


def test_a_measurement_scripts_job_compiles_a_cubin_cleared_after_the_compile_again(tmp_path, monkeypatch):
    """inprocess.job_for (bench/timing_*.py) read the cubin's path straight after the compile: a prune or
    `ptxbench cache --clear` in between was a FileNotFoundError. It keeps the evaluator's rule: compile once more."""
    import ptxbench.tools.compile as compile_module
    from ptxbench.tools.gpu.inprocess import job_for
    from ptxbench.workloads.solutions.faults import load_corpus

    workload, corpus = load_corpus()
    compiles = _clear_after_compiles(monkeypatch, compile_module, tmp_path, times=1)
    job = job_for(corpus["control_correct"]["source"], workload, _h200_worker_state(), timeout_s=30)
    assert len(compiles) == 2 and not compiles[1].cached
    assert job.cubin == Path(compiles[1].cubin_path).read_bytes() and job.timeout_s == 30


def test_a_measurement_scripts_job_whose_cubin_is_cleared_twice_names_the_cache(tmp_path, monkeypatch):
    import ptxbench.tools.compile as compile_module
    from ptxbench.tools.gpu.inprocess import job_for
    from ptxbench.workloads.solutions.faults import load_corpus

    workload, corpus = load_corpus()
    _clear_after_compiles(monkeypatch, compile_module, tmp_path)
    with pytest.raises(RuntimeError, match="gone from the compile cache"):
        job_for(corpus["control_correct"]["source"], workload, _h200_worker_state())


def _h200_worker_state():
    """What job_for reads of an in-process WorkerState: the device limits an H200 reports."""
    from types import SimpleNamespace

    return SimpleNamespace(limits=SimpleNamespace(sm_count=132, cluster_capacity={}))


def _evaluate_on_a_passing_fake_worker(workload: str, source: str):
    """The source evaluated by a LocalEvaluator whose one GPU worker answers PASSED: (result, the workers made)."""
    from fake_workers import AnswerWorker
    from ptxbench.tools.evaluate import LocalEvaluator
    from ptxbench.tools.evaluator import EvalOptions
    from ptxbench.tools.gpu.pool import GpuPool, PoolConfig

    workers = []
    pool = GpuPool(PoolConfig(devices=[0], spares=0),
                   factory=lambda d, c: workers.append(AnswerWorker(d, "PASSED")) or workers[-1])
    ev = LocalEvaluator(pool)
    try:
        return ev.evaluate(workload, source, EvalOptions(trials=1)), workers
    finally:
        ev.close()


def test_a_cache_folder_given_with_an_unexpanded_tilde_is_under_home(tmp_path, monkeypatch):
    """PTXBENCH_CACHE='~/c' from a unit file or .env (no shell expanded it) made a folder named '~' in the working
    directory; it is the home folder's c, as the runs root's '~' is."""
    from ptxbench.tools.cache import cache_root

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PTXBENCH_CACHE", "~/c")
    assert cache_root() == tmp_path / "home" / "c"
