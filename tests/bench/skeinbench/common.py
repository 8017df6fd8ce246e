"""Process, mount and file helpers every part of the bench uses. Standard library only."""

import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[3]
SKEIN_LOCAL = CHECKOUT / "deploy" / "skein-local"
DELAY_RELAY = CHECKOUT / "deploy" / "delay-relay.py"
MiB = 1 << 20
GiB = 1 << 30

T_START = time.monotonic()


def log(msg):
    print(f"[bench {time.monotonic() - T_START:6.1f}s] {msg}", file=sys.stderr, flush=True)


class BenchError(Exception):
    pass


def run(cmd, timeout=600, check=True, capture=False, env=None, **kw):
    """Run cmd (list); raise BenchError on failure or timeout."""
    try:
        p = subprocess.run(cmd, timeout=timeout, env=env, text=True, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.PIPE if capture else None, **kw)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {shlex.join(map(str, cmd))}")
    if check and p.returncode != 0:
        err = (p.stderr or "").strip()[-2000:] if capture else ""
        raise BenchError(f"exit {p.returncode}: {shlex.join(map(str, cmd))} {err}")
    return p


def timed(cmd, timeout=900):
    t0 = time.perf_counter()
    run(cmd, timeout=timeout, capture=True)
    return time.perf_counter() - t0


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        raise BenchError(f"cannot drop the page cache (run as root): {e}")


def mounted_points():
    pts = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            pts.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), mp))
    return pts


def is_mounted(path):
    return str(path) in mounted_points()


def wait_for(pred, timeout, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def unmount(path):
    path = str(path)
    for cmd in (["fusermount3", "-u", path], ["fusermount3", "-uz", path], ["umount", "-l", path]):
        if not is_mounted(path):
            return True
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=20, check=False)
    return not is_mounted(path)


def proc_status(pid, field):
    """Value of FIELD (e.g. VmHWM) in /proc/PID/status, in bytes; None if gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def find_pids(comm, arg):
    """Pids of live processes named COMM (comm or argv[0] basename) with ARG among their args."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open(f"/proc/{d}/comm") as f:
                c = f.read().strip()
        except OSError:
            continue
        if not argv:
            continue
        if (c == comm[:15] or os.path.basename(argv[0]) == comm) and str(arg) in argv:
            out.append(int(d))
    return out


def session_members(sid):
    """Pids in session SID (sshfs double-forks its ssh, so ssh is not its child but stays in its session)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == sid:
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            if int(st.rsplit(")", 1)[1].split()[4]) == sid:
                out.append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    return out


def comm_of(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return float("nan")


def percentile(values, p):
    """Nearest-rank percentile."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = max(0, min(len(v) - 1, math.ceil(p / 100.0 * len(v)) - 1))
    return v[k]


def write_pattern_file(path, size):
    """A file of SIZE bytes of pseudo-random data (1 MiB random block repeated, shifted)."""
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        left, i = size, 0
        while left > 0:
            n = min(left, MiB)
            r = i % MiB
            chunk = (block[r:] + block[:r])[:n]
            f.write(chunk)
            left -= n
            i += 4097
    return path


def make_tree(root, dirs, per_dir, size=100):
    data = b"m" * size
    for d in range(dirs):
        dp = os.path.join(root, f"d{d:03d}")
        os.makedirs(dp, exist_ok=True)
        for i in range(per_dir):
            with open(os.path.join(dp, f"f{i:05d}"), "wb") as f:
                f.write(data)


def git(*args):
    try:
        return subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except Exception:
        return ""


def wait_all(procs, what):
    """Wait for the processes PROCS (stderr piped); BenchError naming WHAT if any failed."""
    errs = []
    for p in procs:
        try:
            _, e = p.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            p.kill()
            _, e = p.communicate()
            errs.append("timeout")
        if p.returncode:
            errs.append(e.decode(errors="replace").strip())
    if errs:
        raise BenchError(f"{what} failed: {errs}")
