"""parallel: several processes each reading a different file of server 0's export at once
(dd bs=1M, page cache dropped); the aggregate rate through sshfs and through skein."""

import statistics
import subprocess
import time

from ..common import MiB, drop_caches, wait_all, write_pattern_file
from ..report import Row, fmt_bytes, verdict

DESCRIPTION = "four processes reading four different files at once, aggregate MB/s (#5)"
ORDER = 60
FULL = dict(par_procs=4, par_bytes=512 * MiB)
QUICK = dict(par_procs=4, par_bytes=64 * MiB)


def export_bytes(p):
    return p["par_procs"] * p["par_bytes"]


def run(b):
    n, k = b.p["par_bytes"], b.p["par_procs"]
    reps = b.p["reps"]
    sp, kp, ep = b.paths("bench-par")
    ep.mkdir(exist_ok=True)
    for j in range(k):
        write_pattern_file(ep / f"f{j}", n)
    res = {"sshfs": [], "skein": []}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("parallel", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            d = sp if sysname == "sshfs" else kp
            drop_caches()
            t0 = time.perf_counter()
            procs = [subprocess.Popen(["dd", f"if={d / f'f{j}'}", "of=/dev/null", "bs=1M", "status=none"],
                                      stdin=subprocess.DEVNULL, stderr=subprocess.PIPE) for j in range(k)]
            wait_all(procs, f"parallel read on {sysname}")
            t = time.perf_counter() - t0
            res[sysname].append(k * n / t / 1e6)
        b.detail(f"parallel rep {i + 1}: " + ", ".join(f"{s} {v[-1]:.0f} MB/s" for s, v in res.items()))
    for j in range(k):
        (ep / f"f{j}").unlink()
    med = {s: statistics.median(v) for s, v in res.items()}
    r = Row("#5", f"{k} processes reading {k} different {fmt_bytes(n)} files at once, single backend: "
                  f"aggregate (MB/s, median of {reps})", med["sshfs"], med["skein"], "MB/s", "higher",
            "≥ 1.5× sshfs")
    r.result = verdict(r.speedup() >= 1.5)
    b.rows.append(r)
