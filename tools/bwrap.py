"""The command line that starts a program in a bubblewrap sandbox (tools/sandbox.py).

The chain, each step ``exec``-ing the next (one pid, one process group):

``prlimit`` sets the resource limits, ``setpriv`` (only when the launcher is root)
drops to the sandbox uid/gid with no supplementary groups, and ``bwrap`` creates new
user, pid, network, IPC, UTS and cgroup namespaces (``--unshare-all``: no network but
a loopback of its own) and a private root:

- read-only: ``/usr`` (with ``/usr/local`` hidden behind an empty read-only tmpfs) and
  the merged-/usr links ``/bin``, ``/lib*``, ``/sbin``; nothing of ``/etc``, ``/home``,
  ``/root``, ``/var``, ``/work``, ``/sys``;
- writable: ``/scratch`` (the working directory, ``HOME``; ``/tmp`` links to it) and
  ``/dev/shm``, each a tmpfs of ``disk_bytes``, so what the code writes is bounded in
  total, lives in memory and is gone when the sandbox ends;
- ``/proc`` of the new pid namespace (the sandbox's own processes only) and a minimal
  ``/dev`` (null, zero, random, urandom, tty, pts), remounted read-only;
- the root itself read-only.

``--die-with-parent`` kills the sandbox when bwrap dies, and the kernel kills every
process of a pid namespace when its init (bwrap's) dies: killing bwrap ends the lot.
``--new-session`` keeps the code off the launcher's terminal (TIOCSTI). The caller
passes an empty environment but for the few variables of :data:`SANDBOX_ENV` (the
``env -i`` of the issue): bwrap's pid 1 shows its environment in ``/proc/1/environ``.

Limits: RLIMIT_CPU (soft ``cpu_s``, SIGXCPU; hard one second later, SIGKILL),
RLIMIT_AS, RLIMIT_NPROC (counted per real uid, so a root launcher must drop to a
non-root uid: root is exempt), RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE 0. Each is
per process except NPROC; the wall-clock limit is the caller's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

# The working directory inside the sandbox.
SCRATCH = "/scratch"
# The whole environment of the sandboxed program (nothing of the launcher's).
SANDBOX_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": SCRATCH,
    "TMPDIR": SCRATCH,
    "LANG": "C.UTF-8",
}
# Top-level entries of a Debian root that the interpreter may need: symlinks into /usr
# on a merged-/usr system (Debian 12), directories otherwise.
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot start here: bwrap, prlimit or setpriv is missing, or the
    configured uid is root."""


@dataclass(frozen=True)
class Confinement:
    """What :func:`bwrap_command` confines a program to: per-process limits (seconds,
    bytes, counts), the size of each writable tmpfs in bytes, and the uid/gid used
    when the launcher is root."""

    cpu_s: int
    memory_bytes: int
    processes: int
    file_bytes: int
    open_files: int
    disk_bytes: int
    uid: int
    gid: int


def tool_path(name: str) -> str:
    """Return the absolute path of the program ``name`` (searching PATH and /usr/bin);
    raise :class:`SandboxUnavailable` when it is not installed."""
    found = shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin")
    if not found:
        raise SandboxUnavailable(
            f"{name} is not installed (Debian: apt-get install bubblewrap util-linux)"
        )
    return found


def root_mounts() -> list[str]:
    """Return bwrap's arguments for the read-only system part of the root."""
    args = ["--ro-bind", "/usr", "/usr"]
    if os.path.isdir("/usr/local"):
        args += ["--tmpfs", "/usr/local", "--remount-ro", "/usr/local"]
    for path in ROOT_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def bwrap_command(argv: list[str], *, confine: Confinement) -> list[str]:
    """Return the command line that runs ``argv`` (absolute program path first) in
    the sandbox under ``confine``; raise :class:`SandboxUnavailable` when a program
    of the chain is missing or the sandbox would run as root."""
    prlimit = tool_path("prlimit")
    bwrap = tool_path("bwrap")
    cpu = confine.cpu_s
    command = [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={confine.memory_bytes}",
        f"--nproc={confine.processes}",
        f"--fsize={confine.file_bytes}",
        f"--nofile={confine.open_files}",
        "--core=0",
        "--",
    ]
    if os.geteuid() == 0:
        if confine.uid == 0 or confine.gid == 0:
            raise SandboxUnavailable("the sandbox must not run as root (uid/gid 0)")
        command += [
            tool_path("setpriv"),
            f"--reuid={confine.uid}",
            f"--regid={confine.gid}",
            "--clear-groups",
            "--",
        ]
    size = str(confine.disk_bytes)
    command += [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "sandbox",
        *root_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        size,
        "--tmpfs",
        SCRATCH,
        "--symlink",
        SCRATCH,
        "/tmp",
        "--remount-ro",
        "/",
        "--chdir",
        SCRATCH,
        "--",
        *argv,
    ]
    return command
