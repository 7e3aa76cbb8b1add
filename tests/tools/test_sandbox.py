"""tools/sandbox.py: python_run in a real bubblewrap sandbox, and the escapes of
issue 26's list, each refused or cut off with nothing leaking to the host."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tools.sandbox import SandboxLimits, SandboxResult, python_run

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None and not Path("/usr/bin/bwrap").exists(),
    reason="bubblewrap is not installed (make sandbox, or apt-get install bubblewrap)",
)

PYTHON = "/usr/bin/python3"


def limits(**changes: object) -> SandboxLimits:
    """The test settings' limits with ``changes``."""
    return dataclasses.replace(SandboxLimits.from_settings(), **changes)


def run(code: str, **changes: object) -> SandboxResult:
    return python_run(code, limits=limits(**changes))


def wait_until(check: Callable[[], bool], *, timeout_s: float) -> bool:
    """Poll ``check`` every 20 ms until it is true or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def marked(marker: str) -> list[int]:
    """Pids of the host's processes whose command line mentions ``marker``."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(marker in part for part in cmdline) and proc.pid != os.getpid():
            found.append(proc.pid)
    return found


def marked_program(marker: str, body: str) -> str:
    """Code that re-executes the interpreter on ``body`` with ``marker`` in its
    command line, so the test can look for what is left of it on the host."""
    program = f"# {marker}\n{body}"
    return f"import os\nos.execv({PYTHON!r}, [{PYTHON!r}, '-c', {program!r}])\n"


def test_hello_world_and_a_computed_result():
    result = run("print('hello, world')\nprint(sum(i * i for i in range(10)))")
    assert result.ok, result
    assert result.stdout == "hello, world\n285\n"
    assert result.stderr == ""
    assert not result.timed_out and not result.killed
    assert result.wall_ms > 0


def test_an_exception_is_the_programs_stderr_and_status():
    result = run("raise SystemExit(3)")
    assert result.exit_code == 3 and not result.killed
    result = run("1 / 0")
    assert result.exit_code == 1
    assert "ZeroDivisionError" in result.stderr


def test_the_hosts_etc_passwd_is_not_there():
    host_first_line = Path("/etc/passwd").read_text().splitlines()[0]
    result = run(
        "try:\n    print(open('/etc/passwd').read())\n"
        "except OSError as exc:\n    print('refused', type(exc).__name__)"
    )
    assert result.stdout == "refused FileNotFoundError\n"
    assert host_first_line not in result.stdout + result.stderr


def test_the_launchers_environment_does_not_leak(monkeypatch):
    secret = "sandbox-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("CHATSITE_SANDBOX_TEST_SECRET", secret)
    code = (
        "import os, glob\n"
        "print(dict(os.environ))\n"
        "print(open('/proc/1/environ').read())\n"
        "for path in glob.glob('/proc/[0-9]*/environ'):\n"
        "    try:\n        print(path, open(path).read())\n"
        "    except OSError as exc:\n        print(path, exc)\n"
    )
    result = run(code)
    assert result.ok, result
    assert "/proc/1/environ" in result.stdout  # it did read them
    assert secret not in result.stdout + result.stderr
    assert "CHATSITE" not in result.stdout
    assert "DJANGO_SETTINGS_MODULE" not in result.stdout


def test_os_system_runs_as_a_non_root_uid_with_no_effect_outside(tmp_path):
    outside = tmp_path / "pwned"
    code = (
        "import importlib\n"
        "os = importlib.import_module('os')\n"
        "print('status', os.system('id'))\n"
        f"print('touch', os.system('touch {outside} 2>/dev/null'))\n"
        "print('uid', os.getuid(), os.geteuid())\n"
    )
    result = run(code)
    assert result.ok, result
    assert "status 0" in result.stdout
    assert "uid=0(" not in result.stdout and "uid 0" not in result.stdout
    assert f"uid={os.getuid() if os.geteuid() else 65534}" in result.stdout
    assert "touch 0" not in result.stdout
    assert not outside.exists()


def test_a_socket_to_the_hosts_loopback_is_refused():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "print(socket.if_nameindex())\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError as exc:\n    print('refused', exc)\n"
            "try:\n"
            "    socket.getaddrinfo('example.com', 80)\n    print('resolved')\n"
            "except OSError as exc:\n    print('no dns', exc)\n"
        )
        result = run(code)
        assert result.ok, result
        assert "[(1, 'lo')]" in result.stdout  # its own loopback, nothing else
        assert "refused" in result.stdout and "connected" not in result.stdout
        assert "no dns" in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_a_fork_bomb_is_cut_by_the_process_limit_and_leaves_nothing():
    marker = "forkbomb-" + secrets.token_hex(6)
    body = "import os\nwhile True:\n    os.fork()\n"
    started = time.monotonic()
    result = run(marked_program(marker, body), wall_s=20.0)
    assert time.monotonic() - started < 10
    assert not result.timed_out
    assert "Resource temporarily unavailable" in result.stderr
    assert wait_until(lambda: not marked(marker), timeout_s=5), marked(marker)


def test_a_10_gb_write_is_cut_by_the_file_size_limit():
    code = (
        "block = b'0' * (1 << 20)\n"
        "with open('big', 'wb') as f:\n"
        "    for _ in range(10 * 1024):\n"
        "        f.write(block)\n"
    )
    started = time.monotonic()
    result = run(code, file_bytes=4 << 20)
    assert time.monotonic() - started < 5
    assert result.exit_code == 1 and not result.timed_out
    assert "File too large" in result.stderr


def test_many_files_are_cut_by_the_size_of_the_scratch_tmpfs():
    code = (
        "block = b'0' * (1 << 20)\n"
        "for i in range(64):\n"
        "    with open(f'/tmp/f{i}', 'wb') as f:\n"
        "        f.write(block * 3)\n"
    )
    result = run(code, file_bytes=4 << 20, disk_bytes=16 << 20)
    assert result.exit_code == 1
    assert "No space left on device" in result.stderr


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit_with_its_children():
    marker = "loop-" + secrets.token_hex(6)
    body = "import os\nos.fork()\nprint('looping', flush=True)\nwhile True:\n    pass\n"
    result = run(marked_program(marker, body), wall_s=1.5, cpu_s=30)
    assert result.timed_out and result.killed
    assert 1400 <= result.wall_ms < 5000
    assert "looping" in result.stdout  # what it printed before the kill is kept
    assert wait_until(lambda: not marked(marker), timeout_s=5), marked(marker)


def test_a_program_that_closes_its_output_still_meets_the_wall_clock_limit():
    code = "import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass\n"
    result = run(code, wall_s=1.5, cpu_s=30)
    assert result.timed_out and result.killed
    assert 1400 <= result.wall_ms < 5000


def test_cpu_time_is_cut_by_the_cpu_limit():
    result = run("while True:\n    pass\n", cpu_s=1, wall_s=10.0)
    assert result.killed and not result.timed_out
    assert result.exit_code == 128 + 24  # SIGXCPU at the soft limit
    assert result.wall_ms < 5000


def test_an_output_flood_is_truncated_with_a_note():
    code = (
        "import sys\nsys.stdout.write('x' * 10_000_000)\nsys.stderr.write('e' * 5000)"
    )
    result = run(code, output_bytes=1000)
    assert result.ok, result.stderr[-300:]
    assert result.stdout == "x" * 1000 + "\n[output truncated: 9999000 more bytes]\n"
    assert result.stderr == "e" * 1000 + "\n[output truncated: 4000 more bytes]\n"


def test_a_memory_bomb_is_cut_by_the_memory_limit():
    result = run("a = bytearray(10 ** 10)")
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(1 << 20))\n"
    result = run(code, memory_bytes=128 << 20)
    assert result.exit_code == 1 and "MemoryError" in result.stderr
    assert not result.timed_out


def test_runs_do_not_see_each_others_files_and_leave_none_on_the_host():
    name = "left-" + secrets.token_hex(6)
    code = (
        "import os\n"
        f"open({name!r}, 'w').write('x')\n"
        f"open('/tmp/' + {name!r} + '-tmp', 'w').write('x')\n"
        "print(os.getcwd(), sorted(os.listdir('.')))\n"
    )
    first = run(code)
    assert first.ok, first
    assert first.stdout.startswith("/scratch ")
    assert name in first.stdout
    second = run("import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))")
    assert second.stdout == "[] []\n"
    on_host = [
        p for root in ("/tmp", "/var/tmp", "/") for p in Path(root).glob(f"{name}*")
    ]
    assert on_host == []


def test_the_host_filesystem_is_not_writable():
    code = (
        "import os\n"
        "for path in ['/x', '/usr/x', '/usr/local/x', '/bin/x', '/dev/x', "
        "'/proc/x', '/etc/x', '/work/x', '/root/x']:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n        print('WROTE', path)\n"
        "    except OSError as exc:\n        print('refused', path, exc.errno)\n"
        "print(sorted(os.listdir('/')))\n"
    )
    result = run(code)
    assert result.ok, result
    assert "WROTE" not in result.stdout
    assert result.stdout.count("refused") == 9
    listing = result.stdout.splitlines()[-1]
    for hidden in ("etc", "home", "root", "var", "work", "sys"):
        assert f"'{hidden}'" not in listing


def test_a_program_over_the_size_limit_is_refused():
    with pytest.raises(ValueError, match="at most 100"):
        run("x = 1\n" * 100, code_bytes=100)
