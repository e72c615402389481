"""The worker pool: one long-lived worker per GPU, a hot spare each, and a watchdog in the parent.

Workers are started with multiprocessing's 'forkserver' method (or 'spawn'): the fork server is a
fresh interpreter that imports torch and the worker code but never touches CUDA, so each worker
forks from a CUDA-free process in well under a second and creates its own context. The parent never
imports torch. Jobs queue for a free GPU (one at a time per GPU, since timing needs it alone).

The watchdog follows the worker's phase messages: each phase ('prepare', 'run', 'timing') comes
with the time it may take (for the candidate's phases, a limit adapted to the workload and to the
kernel's first call: watchdog.py; the job's timeout_s caps it). No message within that time -> the
worker is killed: TIMEOUT (naming the phase, the limit and how it was reached) when a candidate was
running, INFRA_ERROR when the harness's own preparation stalled. A dead worker or a
result marked `replace` (sticky CUDA error) -> the worker is replaced by its spare, and a new
spare starts in the background. The caller always gets a result dict. A GPU whose worker cannot start (lost
mid-run) takes no job for a while (PoolConfig.lost_gpu_pause_s): the job that met it runs on another GPU, nothing of
it having run; with no other GPU left it is INFRA_ERROR. After close() no worker starts: a job in flight comes back
INFRA_ERROR.

Free GPUs wait in a SlotQueue (slots.py): a job takes any free one; `exclusive(device)` takes one
named device for work outside the worker (a profiler replay started on that device) and holds only
that device, so the other GPUs keep running jobs.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import itertools
import multiprocessing as mp
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable

from pydantic import BaseModel, Field

from .messages import GpuJob, GpuOutcome
from .slots import SlotQueue
from .timeline import GpuTimeline

# The H200 reports some faults (misaligned address, trap) only 0.5-1 s after the kernel starts; a
# watchdog shorter than this would call them hangs (measured: bench/results/gpu_evaluator.md).
MIN_CANDIDATE_LIMIT_S = 2.0
# keyless_server first: the fork server erases the API keys from its memory before anything else runs there
PRELOAD = ["ptxbench.tools.gpu.keyless_server", "numpy", "torch", "cuda.bindings.driver", "ptxbench.tools.gpu.worker", "ptxbench.tools.gpu.runner",
           "ptxbench.tools.gpu.referee", "ptxbench.tools.gpu.pool"]  # pool: each process's entry (_dies_with_the_bench)


class PageableMemoryWarning(RuntimeWarning):
    """The GPU reaches its process's pageable host memory by address (DeviceLimits.pageable_memory_access)."""


PAGEABLE_WARNING = ("this GPU reads and writes its process's ordinary host memory by address (HMM, or ATS on Grace "
                    "Hopper: CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS): a candidate's kernel can reach the GPU "
                    "worker's host memory. The workers hold no API key (tools/gpu/keyless.py), but a kernel could still "
                    "read or corrupt the worker's own state; for untrusted models switch HMM off (load nvidia_uvm with "
                    "uvm_disable_hmm=1) or run on a machine without it. Recorded in every result's fingerprint.")
# A kernel that writes the worker's host memory by address can rewrite what the worker runs next: model text would run
# as host code. So such a GPU takes no candidate unless its user says the models are trusted.
ALLOW_PAGEABLE_ENV = "PTXBENCH_ALLOW_PAGEABLE_MEMORY"
PAGEABLE_REFUSED = ("this GPU reads and writes its process's ordinary host memory by address (HMM, or ATS on Grace "
                    "Hopper), so a candidate's kernel could rewrite the GPU worker's own memory and run as host code: "
                    "switch HMM off (load nvidia_uvm with uvm_disable_hmm=1) or use a machine without it; to evaluate "
                    f"trusted models here anyway, set {ALLOW_PAGEABLE_ENV}=1")


def _pageable_allowed() -> bool:
    import os

    return os.environ.get(ALLOW_PAGEABLE_ENV, "").strip().lower() in ("1", "true", "yes")


class NoGpuError(RuntimeError):
    """The pool could not start a worker: no GPU, or a missing GPU-side package (the message says which)."""


def visible_devices() -> list[int] | None:
    """The GPUs a worker will see, known without touching CUDA here (the parent never imports torch), so every
    GPU's worker starts at once; None when only a worker can tell (then the first one is asked, and the others
    start after it: one worker's start-up later)."""
    import os
    import shutil
    import subprocess

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        entries = [e for e in visible.split(",") if e.strip()]
        return list(range(len(entries))) or None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    count = sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0
    return list(range(count)) or None


def missing_gpu() -> str | None:
    """Why no GPU worker can start on this machine, known without starting one (the parent never imports torch): no
    NVIDIA driver (on Linux: no /dev/nvidiactl, no /proc/driver/nvidia, no WSL /dev/dxg; macOS has none), or the
    workers' CUDA bindings (cuda-python) not installed. None when a worker may start: only it can tell for sure."""
    import importlib.util
    import os
    import sys

    if sys.platform == "darwin":
        return "macOS has no NVIDIA GPU"
    if sys.platform.startswith("linux") and not any(
            os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")):
        return "no NVIDIA driver on this machine: no /dev/nvidiactl"
    try:
        found = importlib.util.find_spec("cuda.bindings") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return "the GPU workers' CUDA bindings are not installed: no module cuda.bindings (pip install cuda-python)"
    return None


def _oom_kills() -> int | None:
    """How many processes the host's out-of-memory killer has ended (/proc/vmstat's oom_kill, a cgroup's limit
    included); None where it is not told."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class PoolConfig(BaseModel):
    devices: list[int] | None = Field(None, description="GPU indices; None = every visible GPU")
    start_method: str = Field("forkserver", description="'forkserver' (fast replacement) or 'spawn'")
    spares: int = Field(1, description="hot spare workers per GPU, ready to replace a failed one")
    cache_share: float = Field(0.4, description="share of GPU memory for cached inputs, references and baselines")
    start_timeout_s: float = 300.0
    prepare_timeout_s: float = Field(900.0, description="watchdog limit for building inputs, references and baselines")
    lost_gpu_pause_s: float = Field(60.0, description="a GPU whose worker could not start takes no job this long (its "
                                    "jobs go to the other GPUs), then is tried again")
    allow_pageable_memory: bool = Field(default_factory=_pageable_allowed, description=(
        "evaluate on a GPU that reaches its process's host memory by address (HMM / ATS), with a warning; refused "
        f"otherwise (default: the environment's {ALLOW_PAGEABLE_ENV})"))


def _dies_with_the_bench(lifeline, target, *args) -> None:
    """A worker's (or referee's) entry: a thread waits on `lifeline`, the read end of a pipe whose only write end the
    pool holds, and kills the process when it ends: when the bench process ends, however that ends (SIGKILL, the OOM
    killer: no close() runs), or the pool closes. An idle worker would exit at its own pipe's end anyway; one running a
    hung candidate reads no pipe and spun on its GPU for good, beside the next run's timings. (PR_SET_PDEATHSIG would
    not do: under the fork server the parent is the fork server, which every worker keeps alive.)"""
    import os
    import signal

    def watch() -> None:
        try:
            lifeline.recv_bytes()  # nothing is ever sent: this returns only at the pipe's end
        except (EOFError, OSError):
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="ptxbench-lifeline").start()
    target(*args)


class WorkerProcess:
    """A worker process and its end of the pipe, with the worker's referee (a second process on the same GPU that
    holds the expected outputs: tools/gpu/referee.py), connected to the worker by a pipe of their own."""

    def __init__(self, ctx, device: int, config: dict, lifeline=None):
        from .entry import main, referee_main

        self.device = device
        self.conn, child = ctx.Pipe()
        ref_worker_end, ref_end = ctx.Pipe()

        def process(entry, args, name):  # with a lifeline (the pool's), it dies with the bench
            target, args = (_dies_with_the_bench, (lifeline, entry, *args)) if lifeline is not None else (entry, args)
            return ctx.Process(target=target, args=args, daemon=True, name=name)

        self.referee = process(referee_main, (ref_end, device), f"ptxbench-referee{device}")
        self.referee.start()
        ref_end.close()
        self.proc = process(main, (child, device, config, ref_worker_end), f"ptxbench-gpu{device}")
        self.proc.start()
        child.close()
        ref_worker_end.close()
        self.hello: dict | None = None

    def send(self, msg: dict) -> None:
        self.conn.send(msg)

    def recv(self, timeout: float) -> dict | None:
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            return None
        return None

    def alive(self) -> bool:
        return self.proc.is_alive() and self.referee.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self.proc.exitcode

    def stop(self, grace_s: float = 5.0) -> None:
        """Let it exit after an 'exit' message, else kill it."""
        self.proc.join(timeout=grace_s)
        self.kill()

    def kill(self) -> None:
        for proc in (self.proc, self.referee):
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)
        self.conn.close()


WorkerFactory = Callable[[int, dict], WorkerProcess]


def _result(status: str, message: str, runtime_error: str = "") -> GpuOutcome:
    return GpuOutcome(status=status, message=message, runtime_error=runtime_error)


class DeviceSlot:
    def __init__(self, device: int):
        self.device = device
        self.active: WorkerProcess | None = None
        self.spares: deque[WorkerProcess] = deque()
        self.replacements = 0
        self.jobs = 0


class GpuPool:
    def __init__(self, config: PoolConfig | None = None, factory: WorkerFactory | None = None):
        self.config = config or PoolConfig()
        self._lifeline = None  # the write end of the workers' lifeline (_dies_with_the_bench): only this process has it
        if factory is None:
            ctx = mp.get_context(self.config.start_method)
            if self.config.start_method == "forkserver":
                ctx.set_forkserver_preload(PRELOAD)
            lifeline, self._lifeline = ctx.Pipe(duplex=False)
            factory = lambda device, cfg: WorkerProcess(ctx, device, cfg, lifeline)  # noqa: E731
        self.factory = factory
        self.slots: list[DeviceSlot] = []
        self.free: SlotQueue[DeviceSlot] = SlotQueue()
        self.held_s: dict[int, float] = {}  # device -> seconds held by exclusive() (profiler replays, sanitizer runs)
        self.timeline = GpuTimeline()  # every hold of a GPU: jobs and exclusive holds (tools/gpu/timeline.py)
        self._round = itertools.count()
        self.ceilings: dict[int, dict] = {}
        self.info: dict = {}
        # each worker's start as the pool saw it: device, seconds from the pool's start to its hello, its phases
        self.startup: list[dict] = []
        self._start_t0: float | None = None
        self._start_wall: float | None = None
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()  # start() may be called from several threads: one starts, the others wait
        self._start_error: NoGpuError | None = None  # a start that failed fails every later call at once
        self._next_id = 0
        self._started = False
        # set by close(): no worker starts after it (a job in flight when it came would start its replacement, left
        # running with GPU memory held), and a death it causes is no verdict on the candidate
        self._closed = False
        self._paused: set[int] = set()  # devices whose worker could not start: out of the free queue for a while
        # why no GPU can take a job ('' once a worker starts): a job met a worker that could not start on every GPU
        # (the machine's GPUs lost mid-run); the bench stops on it (agent/bench/runner.py: NoWorkerLeft)
        self.no_worker = ""
        self._workers: list[WorkerProcess] = []  # every worker started and maybe still running: close() stops them all

    # ---- start-up ----
    def _worker_config(self) -> dict:
        return {"cache_share": self.config.cache_share}

    def _spawn(self, device: int) -> WorkerProcess:
        with self._lock:  # a close() either sees this worker in the list, or came first and none starts
            if self._closed:
                raise NoGpuError("the GPU pool was closed")
            self._workers.append(self.factory(device, self._worker_config()))
            return self._workers[-1]

    def _kill(self, w: WorkerProcess) -> None:
        w.kill()
        with self._lock:
            self._workers = [other for other in self._workers if other is not w]

    def _await_hello(self, w: WorkerProcess) -> dict:
        if w.hello is None:
            msg = w.recv(self.config.start_timeout_s)
            if msg is None:
                code = w.exitcode
                self._kill(w)
                if code is not None:  # it died before saying hello: its traceback is on stderr
                    raise NoGpuError(f"the GPU worker for device {w.device} exited with code {code} before it started "
                                     f"(see its traceback above; a script that starts the pool needs an "
                                     f"`if __name__ == '__main__':` guard)")
                raise NoGpuError(f"the GPU worker for device {w.device} did not start within "
                                 f"{self.config.start_timeout_s:.0f} s")
            if msg.get("error"):
                self._kill(w)
                raise NoGpuError(f"the GPU worker for device {w.device} could not start: {msg['error']}")
            w.hello = msg
            self.no_worker = ""
            entry = {"device": w.device, "in_worker_s": round(float(msg.get("startup_s", 0.0)), 3),
                     "ready_after_s": round(time.monotonic() - (self._start_t0 or time.monotonic()), 3),
                     "phases": msg.get("startup_phases") or {}}
            if msg.get("started_at") and self._start_wall:  # the process start (forkserver, preload, fork) before it
                entry["process_start_s"] = round(float(msg["started_at"]) - self._start_wall, 3)
            self.startup.append(entry)
        return w.hello

    def start(self) -> GpuPool:
        if self._started:
            return self
        with self._start_lock:
            if self._started:
                return self
            if self._closed:
                raise NoGpuError("the GPU pool was closed")
            if self._start_error is not None:
                raise self._start_error
            spawned: list[WorkerProcess] = []
            try:
                return self._start(spawned)
            except Exception as e:  # whatever failed, nothing it started is left running, and later calls say why
                for w in spawned:
                    self._kill(w)
                self.slots, self.free, self.startup = [], SlotQueue(), []
                self._start_error = e if isinstance(e, NoGpuError) else NoGpuError(
                    f"the GPU workers could not start: {type(e).__name__}: {e}")
                raise self._start_error from (None if e is self._start_error else e)

    def _start(self, spawned: list[WorkerProcess]) -> GpuPool:
        def spawn(device: int) -> WorkerProcess:
            spawned.append(self._spawn(device))
            return spawned[-1]

        self._start_t0, self._start_wall = time.monotonic(), time.time()
        guess = self.config.devices if self.config.devices is not None else visible_devices()
        actives = {d: spawn(d) for d in (guess or [0])}  # every GPU's worker starts at once when they are known
        first = next(iter(actives.values()))
        hello = self._await_hello(first)
        self.info = hello
        if (hello.get("limits") or {}).get("pageable_memory_access"):
            if not self.config.allow_pageable_memory:
                raise NoGpuError(PAGEABLE_REFUSED)
            warnings.warn(PAGEABLE_WARNING, PageableMemoryWarning, stacklevel=2)
        count = int(hello.get("device_count", 1))
        devices = self.config.devices if self.config.devices is not None else list(range(count))
        for d, w in actives.items():
            if d not in devices:  # a guess the worker's CUDA does not confirm (CUDA_VISIBLE_DEVICES naming a missing GPU)
                self._kill(w)
        for d in devices:
            slot = DeviceSlot(d)
            slot.active = actives.get(d) or spawn(d)
            for _ in range(self.config.spares):
                slot.spares.append(spawn(d))
            self.slots.append(slot)
        for slot in self.slots:
            self._await_hello(slot.active)
            self.free.put(slot)
        self._started = True
        return self

    @property
    def startup_s(self) -> list[float]:
        """Each worker's time from its process start to ready, as it measured it."""
        return [w["in_worker_s"] for w in self.startup]

    def _info(self) -> dict:
        """The first worker's hello; a closed pool answers from the one it had (an evaluation whose job ended as the
        pool closed records its GPU), never by starting its workers again."""
        return self.info if self._closed and self.info else self.start().info

    @property
    def limits(self) -> dict:
        return self._info()["limits"]

    @property
    def fingerprint(self) -> dict:
        return self._info()["fingerprint"]

    # ---- jobs ----
    def submit(self, job: GpuJob | dict, priority: float = 0.0) -> GpuOutcome:
        """Run one job on the next free GPU (waiting jobs: highest `priority` first, slots.py); returns the worker's
        outcome (never raises for kernel faults)."""
        job = job if isinstance(job, GpuJob) else GpuJob.model_validate(job)
        self.start()
        failed: list[DeviceSlot] = []  # GPUs whose worker could not start for this job
        while True:
            asked = self.timeline.now()
            slot = self.free.get(priority=priority)
            got = self.timeline.now()
            paused = False
            try:
                return self._run(slot, job)
            except NoGpuError as e:  # its worker could not start, so nothing of this job ran: another GPU runs it
                failed.append(slot)
                # a lost GPU answers at once and is free at once: left in the queue it would take most jobs while
                # the others are busy, each one an INFRA_ERROR spending a trajectory's retry
                paused = self._pause(slot, failed)
                if not paused:  # no other GPU to try
                    if not self._closed:
                        self.no_worker = f"no GPU worker can start on any of this machine's GPUs ({e})"
                    return _result("INFRA_ERROR", str(e))
            finally:
                self.timeline.add(slot.device, "job", False, asked, got, self.timeline.now(), job.workload)
                if not paused:
                    self.free.put(slot)

    def _pause(self, slot: DeviceSlot, failed: list[DeviceSlot]) -> bool:
        """Hold `slot` out of the free queue for lost_gpu_pause_s, unless no other GPU is left to take jobs
        (one not in `failed` nor paused): the last one is never held back, so a job always finds a GPU."""
        with self._lock:
            if self._closed or not any(s not in failed and s.device not in self._paused for s in self.slots):
                return False
            self._paused.add(slot.device)
        timer = threading.Timer(self.config.lost_gpu_pause_s, self._resume, args=(slot,))
        timer.daemon = True
        timer.start()
        return True

    def _resume(self, slot: DeviceSlot) -> None:
        with self._lock:
            self._paused.discard(slot.device)
            if self._closed:
                return
        self.free.put(slot)

    def pick_device(self) -> int:
        """A device for work that must name its GPU before it holds it (a replay process): a free one, else the one
        the fewest such requests wait for (round robin between equals)."""
        self.start()
        with self._lock:  # a GPU held back after its worker could not start would keep the request waiting
            devices = [s.device for s in self.slots if s.device not in self._paused] or [s.device for s in self.slots]
        return self.free.least_loaded(devices, next(self._round))

    @contextmanager
    def exclusive(self, device: int | None = None, priority: float = 0.0, what: str = "") -> Iterator[int]:
        """Hold one GPU (`device`, else any free one) for work outside the worker (a profiler or sanitizer run), so
        nothing is timed on it meanwhile. Only that GPU is held: the others keep taking jobs."""
        self.start()
        asked = self.timeline.now()
        slot = self.free.get(device, priority)
        got = self.timeline.now()
        try:
            yield slot.device
        finally:
            end = self.timeline.now()
            with self._lock:
                self.held_s[slot.device] = self.held_s.get(slot.device, 0.0) + end - got
            self.timeline.add(slot.device, "hold", device is not None, asked, got, end, what)
            self.free.put(slot)

    def _ensure_active(self, slot: DeviceSlot) -> WorkerProcess:
        spare_lost = False
        while slot.active is None or not slot.active.alive():
            if slot.active is not None:
                self._kill(slot.active)
            from_spare = bool(slot.spares)
            slot.active = slot.spares.popleft() if slot.spares else self._spawn(slot.device)
            while len(slot.spares) < self.config.spares:
                slot.spares.append(self._spawn(slot.device))
            try:
                self._await_hello(slot.active)
            except NoGpuError:
                # a spare lost while it waited (the OOM killer, a start that broke) is no sign that a fresh worker
                # fails too: one more is tried before the job is told the GPU cannot be used
                if not from_spare or spare_lost:
                    raise
                spare_lost = True
        return slot.active

    def _replace(self, slot: DeviceSlot) -> None:
        if slot.active is not None:
            self._kill(slot.active)
        slot.active = None
        slot.replacements += 1
        self._ensure_active(slot)

    def _retire(self, slot: DeviceSlot) -> None:
        """Replace the worker after a verdict that needs it; should no replacement start, the slot is left empty for
        the next job to fill (that job's answer says why it cannot), and this job keeps its own verdict."""
        try:
            self._replace(slot)
        except NoGpuError:
            if slot.active is not None:
                self._kill(slot.active)
            slot.active = None

    def _run(self, slot: DeviceSlot, job: GpuJob) -> GpuOutcome:
        w = self._ensure_active(slot)
        with self._lock:
            self._next_id += 1
            job_id = self._next_id
        limit = job.timeout_s
        update = {"id": job_id, "ceilings": self.ceilings.get(slot.device, job.ceilings)}
        if "prepare_timeout_s" not in job.model_fields_set:
            update["prepare_timeout_s"] = self.config.prepare_timeout_s
        message = job.model_copy(update=update).model_dump()
        try:
            w.send(message)
        except (OSError, ValueError):  # it died since it was seen alive (its pipe broken): the job never reached it,
            self._retire(slot)  # so its replacement runs it, no retry of the trajectory spent on a harness crash
            w = self._ensure_active(slot)
            w.send(message)
        slot.jobs += 1
        ooms = _oom_kills()  # a SIGKILL this count went up under is the host's memory, not the candidate
        phase, deadline = "prepare", time.monotonic() + self.config.prepare_timeout_s
        phase_limit, phase_why = self.config.prepare_timeout_s, ""
        candidate_in = False  # whether this job reached the loading of its candidate (a death before is not its own)
        while True:
            reply = w.recv(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            now = time.monotonic()
            if reply is None:
                if not w.alive():
                    from ..compile import OUTSIDE_SIGNALS

                    code = w.exitcode
                    if self._closed:  # close() ended it (its grace ran out under a running candidate): no verdict
                        return _result("INFRA_ERROR", "the GPU pool was closed while this job ran")
                    self._retire(slot)
                    if not candidate_in:
                        return _result("INFRA_ERROR", f"the GPU worker process died while preparing inputs and "
                                                      f"references, before the candidate was loaded (exit code {code}); "
                                                      f"it was replaced")
                    # a stop from outside (a scheduler, a shutdown) kills the worker and its referee alike, either seen
                    # first; no candidate sends its worker a signal, so no verdict on it
                    codes = (code, getattr(getattr(w, "referee", None), "exitcode", None))
                    outside = next((OUTSIDE_SIGNALS[-c] for c in codes if c is not None and -c in OUTSIDE_SIGNALS), "")
                    if outside:
                        return _result("INFRA_ERROR", f"the GPU worker process was killed by {outside} from outside "
                                                      f"while running the candidate; it was replaced")
                    if -9 in codes and ooms is not None and (_oom_kills() or 0) > ooms:  # (one message: a repeat on
                        # the same kernel is scored as the model's, scoring/turns.py 'reproduced')
                        return _result("INFRA_ERROR", "the GPU worker process was ended by the host's out-of-memory "
                                                      "killer while running the candidate; it was replaced")
                    if code is None:  # the worker runs on and its referee, which runs no candidate code, is gone: the
                        # worker itself reports a referee lost as the harness's failure
                        return _result("INFRA_ERROR", f"the GPU worker's referee process died (exit code {codes[1]}) "
                                                      f"while the candidate ran; both were replaced")
                    return _result("RUNTIME_ERROR", f"the GPU worker process died while running the candidate "
                                                    f"(exit code {code})",
                                   runtime_error=f"WORKER_DIED: exit code {code}")
                if now > deadline:
                    self._retire(slot)
                    if phase in ("run", "timing"):
                        where = f"{phase} phase: {phase_why}" if phase_why else f"{phase} phase"
                        # (no word of the harness's own process: the model reads this and can use none of it)
                        return _result("TIMEOUT", f"the kernel did not finish within {phase_limit:.3g} s ({where})",
                                       runtime_error=f"TIMEOUT after {phase_limit:.3g} s ({phase} phase)")
                    return _result("INFRA_ERROR", f"preparing inputs, references or baselines took longer than "
                                                  f"{self.config.prepare_timeout_s:g} s")
                continue
            if reply.get("id") not in (None, job_id):
                continue
            if reply["type"] == "phase":
                phase, phase_why = reply["phase"], str(reply.get("why") or "")
                candidate_in = candidate_in or phase != "prepare"
                phase_limit = float(reply["limit_s"])
                if phase in ("run", "timing"):  # the worker's limit (watchdog.py): at most timeout_s, at least the floor
                    phase_limit = max(min(phase_limit, limit), MIN_CANDIDATE_LIMIT_S)
                deadline = now + phase_limit
            elif reply["type"] == "result":
                result = GpuOutcome.model_validate(reply["result"])
                if result.timing and result.timing.ceilings:
                    self.ceilings.setdefault(slot.device, result.timing.ceilings)
                if reply.get("replace"):
                    self._retire(slot)
                return result

    def ping(self) -> list[dict]:
        """Each GPU's worker answers (checks the pool is healthy); returns their cache stats."""
        self.start()
        out = []
        for _ in self.slots:
            slot = self.free.get()
            try:
                w = self._ensure_active(slot)
                w.send({"type": "ping"})
                reply = w.recv(30.0)
                out.append({"device": slot.device, "ok": bool(reply and reply.get("type") == "pong"),
                            "replacements": slot.replacements, "jobs": slot.jobs, **((reply or {}).get("cache") or {})})
            finally:
                self.free.put(slot)
        return out

    def close(self) -> None:
        """Stop every worker; the pool starts none after this (a job in flight comes back INFRA_ERROR)."""
        with self._start_lock:  # a start in progress (on a thread of its own) ends first, so none of it outlives this
            with self._lock:
                self._closed = True
                workers, self._workers = self._workers, []
            self._close(workers)

    def _close(self, workers: list[WorkerProcess]) -> None:
        for w in workers:
            try:
                w.send({"type": "exit"})
            except (OSError, ValueError):
                pass
        for w in workers:
            w.stop()
        for slot in self.slots:
            slot.active, slot.spares = None, deque()
        self.slots = []
        self._started = False
        if self._lifeline is not None:  # whatever did not exit by now (a worker deaf to its pipe) ends with it
            self._lifeline.close()

    def __enter__(self) -> GpuPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
