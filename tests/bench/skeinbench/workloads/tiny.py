"""tiny: many tiny files in a fresh directory of server 0's export, each written by the shell's
`echo` (open O_CREAT|O_TRUNC, write, close) and then, cold, each read by `cat` (a process per
file), through sshfs and through skein. Cold: the page cache dropped, sshfs remounted (its own
attribute and listing caches gone) and skein-mount's caches dropped (`--drop-caches`: among them
the small files it wrote whole and kept, which would otherwise answer the reads)."""

import statistics
import subprocess
import time

from ..common import BenchError, drop_caches, run as run_cmd
from ..report import Row, fmt_time, verdict

DESCRIPTION = "tiny files: write each with echo, then read each with cat (#19)"
ORDER = 22
FULL = dict(tiny_files=10000)
QUICK = dict(tiny_files=1000)

ECHO = 'cd "$1" && i=0; while [ $i -lt "$2" ]; do echo "tiny file $i" > f$i; i=$((i+1)); done'
CAT = 'cd "$1" && i=0; while [ $i -lt "$2" ]; do cat f$i; i=$((i+1)); done'


def shell(script, d, n):
    t0 = time.perf_counter()
    p = subprocess.run(["sh", "-c", script, "sh", str(d), str(n)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800)
    t = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError(f"sh loop in {d} failed: {p.stderr.decode(errors='replace').strip()[-300:]}")
    return t, p.stdout


def run(b):
    n = b.p["tiny_files"]
    reps = b.p["reps"]
    expected = "".join(f"tiny file {i}\n" for i in range(n)).encode()
    sp, kp, _ = b.paths("")
    res = {(s, k): [] for s in ("sshfs", "skein") for k in ("echo", "cat")}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("tiny", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            d = (sp if sysname == "sshfs" else kp) / f"bench-tiny-{i}"
            d.mkdir()
            drop_caches()
            t, _ = shell(ECHO, d, n)
            res[(sysname, "echo")].append(t)
            if sysname == "sshfs":
                b.sA.remount()
            else:
                b.cl.drop_mount_caches(0)
            drop_caches()
            t, out = shell(CAT, d, n)
            if out != expected:
                raise BenchError(f"cat on {sysname} read back something else than echo wrote")
            res[(sysname, "cat")].append(t)
            run_cmd(["rm", "-rf", str(d)], timeout=900)
        b.detail(f"tiny rep {i + 1}: " + ", ".join(f"{s} {k} {fmt_time(v[-1])}" for (s, k), v in res.items()))
    med = {k: statistics.median(v) for k, v in res.items()}
    for kind, what in (("echo", "written each with echo"), ("cat", "then read each with cat, cold")):
        r = Row("#19", f"{n} tiny files, {what} (time, median of {reps})", med[("sshfs", kind)],
                med[("skein", kind)], "s", "lower", "≥ 1.5× sshfs",
                note=f"sshfs {n / med[('sshfs', kind)]:.0f} files/s, skein {n / med[('skein', kind)]:.0f} files/s")
        r.result = verdict(r.speedup() >= 1.5)
        b.rows.append(r)
