"""The compiler jail: every tool that reads model text (nvcc and its children, ptxas, nvdisasm,
cuobjdump) runs with stdin from /dev/null, a private work and TMPDIR folder, limits on address space,
CPU time and file size, an environment stripped to what the tool needs (no API keys), and a
filesystem view in which only the toolchain, the host compiler with its system headers, the
project's include folder and the work folder exist.

Modes (`jail_mode()`, recorded in every CompileResult and run manifest):
    bwrap    bubblewrap builds the view (Debian package `bubblewrap`, 0.3.2 or newer); a bwrap that exits before it
             ran the tool (its --json-status-fd never said the tool's exit code: user namespaces refused, a bind it
             could not make) is a JailError, never the tool's output
    unshare  no bwrap, but user + mount + network namespaces work (`unshare -U -r -m -n`): a tmpfs root with
             bind mounts of the same folders, entered with chroot; before the tool runs, every mount under its root
             but the work folder, /dev/null and /proc is read-only in /proc/self/mountinfo (a mount nested under a
             recursive bind, an old util-linux's ignored ro: remounted read-only); a folder it cannot mount
             read-only stops it (JailError, the machine's failure: never a writable view)
    limits   neither: the tools run on the real filesystem under the same limits; compile.py
             then runs a dependency pass first and refuses any include outside the allowed roots
             (tools/jail_deps.py), showing no compiler text of a refused file
$PTXBENCH_JAIL forces a mode (tests use it to exercise the fallback on a machine that has bwrap).
"""
from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .toolchain import ToolchainError

if TYPE_CHECKING:
    from .toolchain import ProcResult, Toolchain

MODES = ("bwrap", "unshare", "limits")
ENV_MODE = "PTXBENCH_JAIL"
# The host compiler, its libraries and the system headers; /bin, /lib... are symlinks into /usr on
# merged-/usr systems and plain folders elsewhere.
SYSTEM_ROOTS = ("/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libexec", "/usr/include",
                "/bin", "/sbin", "/lib", "/lib64", "/lib32")


@dataclass(frozen=True)
class Limits:
    """Per process. An honest attention kernel needs < 512 MB. The heaviest reference, the attention backward (9 entry
    points), took up to 5.3 s of CPU in nvcc and 4.1 s in ptxas with 16 compiles at once on the H200's host (3.0-4.5 s
    alone; bench/results/compile_cpu.md). CPU time is not a fixed property of a source: the same text varies by a
    quarter between runs and grows under load, and an 8 s limit refused a backward twice the reference's size there.
    30 s leaves honest kernels 5x, and still stops a compile bomb long before nvcc's wall-clock timeout."""

    # read when a compile starts, as the cache key reads them (tools/compile.py): a value fixed at import ran every
    # compile under one limit while the key recorded another
    cpu_s: int = field(default_factory=lambda: int(os.environ.get("PTXBENCH_JAIL_CPU_S", "30")))
    address_space_mb: int = field(default_factory=lambda: int(os.environ.get("PTXBENCH_JAIL_AS_MB", "2048")))
    file_size_mb: int = 128


def _probe(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _bwrap_works() -> bool:
    bwrap = shutil.which("bwrap")
    # --json-status-fd (bwrap 0.3.2): how run_in_jail knows the tool ran; an older bwrap is not used
    return bool(bwrap) and _probe([bwrap, "--json-status-fd", "1", "--unshare-all", "--ro-bind", "/usr", "/usr",
                                   "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
                                   "--symlink", "usr/lib64", "/lib64", "/usr/bin/true"])


def _unshare_works() -> bool:
    if not (shutil.which("unshare") and shutil.which("chroot") and shutil.which("awk")):  # awk reads the view's mounts
        return False
    with tempfile.TemporaryDirectory(prefix="ptxbench-jailprobe-") as d:
        return _probe(["unshare", "-U", "-r", "-m", "-n", "-p", "-f", "sh", "-c", f"mount -t tmpfs none {d} && mount --bind /usr/bin {d}"])


@functools.lru_cache(maxsize=1)
def available_modes() -> tuple[str, ...]:
    """The modes this machine supports, strongest first ('limits' always)."""
    return tuple(m for m, ok in (("bwrap", _bwrap_works()), ("unshare", _unshare_works()), ("limits", True)) if ok)


def jail_mode() -> str:
    """bwrap | unshare | limits: the strongest this machine supports, or what $PTXBENCH_JAIL forces."""
    forced = os.environ.get(ENV_MODE, "").strip()
    if forced:
        if forced not in MODES:
            raise ValueError(f"${ENV_MODE}={forced!r}: expected one of {', '.join(MODES)}")
        return forced
    return available_modes()[0]


def _tool_root(path: str) -> Path:
    """The folder that holds a tool and its companions: the `nvidia` wheel tree (every CUDA wheel:
    headers of cuda_runtime & co. live in sibling wheels), else the folder above bin/."""
    real = Path(os.path.realpath(path))
    for parent in real.parents:
        if parent.name == "nvidia" and parent.parent.name in ("site-packages", "dist-packages"):
            return parent
    return real.parent.parent


def allowed_roots(tool_paths: list[str], extra: list[Path] = ()) -> list[Path]:
    """Read-only folders of the view: the tools' trees, the host compiler's if outside /usr, `extra`."""
    roots = {_tool_root(p) for p in tool_paths}
    roots |= {Path(p).parent.parent for p in tool_paths}  # a wrapper script (/usr/local/bin/nvcc -> exec ...)
    gxx = shutil.which("g++") or shutil.which("c++")
    if gxx and not os.path.realpath(gxx).startswith("/usr/"):
        roots.add(_tool_root(gxx))
    if any(_holds_home(r) for r in roots):  # a tool in ~/bin: its own folder, not all of home (~/.ssh, keys)
        roots = {r for r in roots if not _holds_home(r)} | {Path(p).parent for p in tool_paths}
    roots |= {Path(p) for p in extra}
    return sorted(r for r in roots if r.is_dir() and str(r) not in ("/", "/usr"))


def _holds_home(folder: Path) -> bool:
    """Whether `folder` is the user's home or a folder above it."""
    homes = {Path.home(), Path(os.path.realpath(Path.home()))}
    return any(home == folder or home.is_relative_to(folder) for home in homes)


def _system_binds() -> list[tuple[str, str, str]]:
    """(kind, path, link target) for the system folders that exist here."""
    out = []
    for p in SYSTEM_ROOTS:
        if os.path.islink(p):
            out.append(("ln", p, os.readlink(p)))
        elif os.path.isdir(p):
            out.append(("ro", p, ""))
    return out


JAIL_PATH = "/usr/bin:/bin"  # where nvcc finds the gcc it runs by name


def _env(workdir: Path) -> dict[str, str]:
    """What a compiler needs and nothing else: no API keys, no proxies, no user paths."""
    return {"PATH": JAIL_PATH, "HOME": str(workdir), "TMPDIR": str(workdir / "tmp"), "LANG": "C", "LC_ALL": "C"}


def _ulimit(limits: Limits, fd3: Path | None = None) -> list[str]:
    """Limits set by the shell before exec: safe from the bench's threads (preexec_fn is not); `fd3`: a file the
    command gets open for writing as its fd 3."""
    kb = limits.address_space_mb * 1024
    blocks = limits.file_size_mb * 2048  # ulimit -f counts 512-byte blocks
    redirect = f" 3>{shlex.quote(str(fd3))}" if fd3 else ""
    return ["/bin/sh", "-c",
            f'ulimit -c 0; ulimit -t {limits.cpu_s}; ulimit -v {kb}; ulimit -f {blocks}; exec "$@"{redirect}',
            "ptxbench-jail"]


def _bwrap_status(workdir: Path) -> Path:
    """Where bwrap writes its --json-status-fd documents: beside the work folder, outside the jail's view (a tool
    that could write it could turn its own verdict into the machine's failure)."""
    return workdir.parent / f".{workdir.name}-bwrap-status"


# The unshare script's own failure to build the view: this exit status with JAIL_FAILED as its last line (chroot's
# own failures are 125 too, but say no such line)
JAIL_FAILED_STATUS = 125
JAIL_FAILED = "ptxbench-jail: cannot build the view:"


class JailError(ToolchainError):
    """The jail could not start (a folder it could not mount read-only, a bwrap that could not build its sandbox): the
    machine's problem, not the source's."""


_UNSHARE_SCRIPT = r'''
set -e
PATH=/usr/sbin:/usr/bin:/sbin:/bin
root=$1; wd=$2; shift 2
fail() { echo "ptxbench-jail: cannot build the view: $*" >&2; exit 125; }
# read-only or not at all: a bind -o ro some kernels refuse in a user namespace, then a bind remounted read-only
ro_bind() {
  mount --rbind -o ro "$1" "$root$1" 2>/dev/null && return 0
  mount --rbind "$1" "$root$1" || fail "cannot bind $1"
  mount -o remount,ro,bind "$root$1" || fail "cannot mount $1 read-only"
}
mount -t tmpfs -o mode=755 ptxbench-jail "$root" || fail "cannot mount its root"
nl='
'; dirs="$root/dev$nl$root/proc"; set -f
for a in "$@"; do [ "$a" = "--" ] && break; case "$a" in /*) dirs="$dirs$nl$root$a";; esac; done
# one exec for every mount point (link targets included: harmless), split at line breaks only (a TMPDIR with a space)
IFS=$nl; mkdir -p $dirs 2>/dev/null || true; unset IFS
while [ "$1" != "--" ]; do
  case "$1" in
    ro) ro_bind "$2"; shift 2;;
    rw) mount --bind "$2" "$root$2" || fail "cannot bind the work folder"; shift 2;;
    dev) rmdir "$root$2"; : > "$root$2"; mount --bind "$2" "$root$2" || fail "cannot bind $2"; shift 2;;
    ln) rmdir "$root$2" 2>/dev/null || true; ln -s "$3" "$root$2"; shift 3;;
  esac
done
shift
mount -t proc proc "$root/proc" 2>/dev/null || true
# Every mount under the root read-only but the work folder, /dev/null and /proc, as the kernel says (mountinfo's
# per-mount options): util-linux before 2.27 ignores ro in `--rbind -o ro`, and ro or a remount reaches only the top
# of a recursive bind, never the mounts nested under it. A rw one is remounted read-only, else the jail stops.
writable() {
  JAIL_ROOT=$root JAIL_WD=$root$wd awk '
    function unescaped(s,  out, i, code) {  # mountinfo writes space, tab, newline and backslash as \ooo
      out = ""
      while ((i = index(s, "\\")) > 0) {
        code = substr(s, i + 1, 1) * 64 + substr(s, i + 2, 1) * 8 + substr(s, i + 3, 1)
        out = out substr(s, 1, i - 1) sprintf("%c", code)
        s = substr(s, i + 4)
      }
      return out s
    }
    { mp = unescaped($5); root = ENVIRON["JAIL_ROOT"] }
    index(mp, root "/") == 1 && ("," $6 ",") !~ /,ro,/ && mp != ENVIRON["JAIL_WD"] && mp != root "/dev/null" &&
      mp != root "/proc" { print mp }' /proc/self/mountinfo
}
left=$(writable) || fail "cannot read its mounts"
if [ -n "$left" ]; then
  printf '%s\n' "$left" | while IFS= read -r mp; do mount -o remount,ro,bind "$mp" 2>/dev/null || true; done
  left=$(writable) || fail "cannot read its mounts"
  first=${left%%"
"*}
  [ -z "$left" ] || fail "cannot mount ${first#"$root"} read-only"
fi
exec chroot "$root" /bin/sh -c 'cd "$0" && exec "$@"' "$wd" "$@"
'''


def wrap(argv: list[str], workdir: Path, roots: list[Path], mode: str | None = None,
         limits: Limits | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that run `argv` in the jail; `workdir` (its files in and out) is the only writable folder.
    The caller creates workdir/tmp and removes workdir afterwards."""
    mode = mode or jail_mode()
    limits = limits or Limits()
    workdir = Path(workdir)
    env = _env(workdir)
    binds = _system_binds() + [("ro", str(r), "") for r in roots if not str(r).startswith(tuple(SYSTEM_ROOTS))]
    if mode == "bwrap":
        # fd 3: bwrap says the tool's exit code there only once it ran the tool (run_in_jail reads it)
        cmd = [shutil.which("bwrap") or "bwrap", "--json-status-fd", "3", "--unshare-all", "--die-with-parent",
               "--new-session"]
        for kind, path, target in binds:
            cmd += ["--symlink", target, path] if kind == "ln" else ["--ro-bind", path, path]
        # a fresh /proc of the jail's own pid namespace (cuobjdump finds itself through it): no harness process in it
        cmd += ["--dev-bind", "/dev/null", "/dev/null", "--proc", "/proc", "--bind", str(workdir), str(workdir),
                "--chdir", str(workdir)]
        return _ulimit(limits, _bwrap_status(workdir)) + cmd + ["--"] + list(argv), env
    if mode == "unshare":
        jail_root = workdir.parent / f".{workdir.name}-root"
        jail_root.mkdir(exist_ok=True)
        spec: list[str] = []
        for kind, path, target in binds:
            spec += ["ln", path, target] if kind == "ln" else ["ro", path]
        spec += ["dev", "/dev/null", "rw", str(workdir), "--"]
        # -p -f: a pid namespace of its own, so the /proc mounted inside shows no harness process; -n: a network
        # namespace of its own (loopback only), as bwrap's --unshare-all gives
        cmd = ["unshare", "-U", "-r", "-m", "-n", "-p", "-f", "/bin/sh", "-c", _UNSHARE_SCRIPT, "ptxbench-jail", str(jail_root),
               str(workdir)]
        return _ulimit(limits) + cmd + spec + list(argv), env
    if mode == "limits":
        return _ulimit(limits) + list(argv), env
    raise ValueError(f"unknown jail mode {mode!r}: expected one of {', '.join(MODES)}")


class Workspace:
    """A private folder (and TMPDIR) for one tool run, removed on exit, timeouts included."""

    def __init__(self, prefix: str = "ptxbench-compile-"):
        self._outer = tempfile.mkdtemp(prefix=prefix)
        self.path = Path(self._outer) / "work"
        (self.path / "tmp").mkdir(parents=True)

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self._outer, ignore_errors=True)


def run_in_jail(tc: "Toolchain", argv: list[str], workdir: Path, timeout_s: float, *, extra_roots: tuple[Path, ...] = (),
                max_chars: int | None = None) -> "ProcResult":
    """Run one tool of `tc` on files in `workdir` (a Workspace) inside the jail."""
    from .toolchain import TOOL_NAMES, run_tool

    paths = [t.path for n in TOOL_NAMES if (t := getattr(tc, n)) is not None]
    mode = jail_mode()
    wrapped, env = wrap(argv, workdir, allowed_roots(paths, list(extra_roots)), mode)
    status = _bwrap_status(Path(workdir))
    status.unlink(missing_ok=True)  # an earlier tool's report in this folder says nothing of this one
    try:
        res = run_tool(wrapped, timeout_s=timeout_s, cwd=workdir, env=env, max_chars=max_chars)
        why = _not_started(mode, res, status)
    finally:
        status.unlink(missing_ok=True)
    if why:
        raise JailError(f"the compiler's jail could not start ({why}): the tool did not run")
    return res


def _not_started(mode: str, res: "ProcResult", bwrap_status: Path) -> str:
    """Why the jail ended before it ran the tool ("" when the tool ran, or when a signal or the clock ended the jail:
    those are the caller's to read)."""
    lines = res.stderr.strip().splitlines()
    if mode == "unshare" and res.returncode == JAIL_FAILED_STATUS and lines and lines[-1].startswith(JAIL_FAILED):
        return lines[-1].removeprefix("ptxbench-jail: ")
    if mode == "bwrap" and res.returncode > 0 and not res.timed_out:
        try:
            ran = '"exit-code"' in bwrap_status.read_text(errors="replace")
        except OSError:
            ran = False
        if not ran:  # bwrap's own messages say `bwrap: ...`; the tool printed nothing, it never ran
            said = [line for line in lines if line.startswith("bwrap: ")] or lines
            return said[-1] if said else f"bwrap exited with status {res.returncode}"
    return ""
