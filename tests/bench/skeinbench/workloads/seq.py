"""seq: one file written (dd bs=1M conv=fsync) and read (dd bs=1M, page cache dropped) on server
0's export, through sshfs and through skein's single-backend mount."""

import statistics
import time

from ..common import GiB, MiB, drop_caches, timed, write_pattern_file
from ..report import Row, fmt_bytes, verdict

DESCRIPTION = "sequential write and read of one file, single backend, dd bs=1M (#2, #5)"
ORDER = 10
FULL = dict(seq_bytes=1 * GiB)
QUICK = dict(seq_bytes=128 * MiB)


def export_bytes(p):
    return 2 * p["seq_bytes"]


def run(b):
    n = b.p["seq_bytes"]
    reps = b.p["reps"]
    sp, kp, ep = b.paths("bench-seq")
    ep.mkdir(exist_ok=True)
    src = write_pattern_file(ep / "read-src", n)
    res = {("sshfs", "write"): [], ("skein", "write"): [], ("sshfs", "read"): [], ("skein", "read"): []}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("seq", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            d = sp if sysname == "sshfs" else kp
            f = d / f"write-{sysname}"
            drop_caches()
            t = timed(["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={n // MiB}", "conv=fsync",
                       "status=none"])
            res[(sysname, "write")].append(n / t / 1e6)
            f.unlink()
            drop_caches()
            t = timed(["dd", f"if={d / 'read-src'}", "of=/dev/null", "bs=1M", "status=none"])
            res[(sysname, "read")].append(n / t / 1e6)
        b.detail(f"seq rep {i + 1}: " + ", ".join(f"{s} {p} {res[(s, p)][-1]:.0f} MB/s" for s, p in res))
    src.unlink()
    med = {k: statistics.median(v) for k, v in res.items()}
    label = fmt_bytes(n)
    r = Row("#2 #5", f"sequential read {label}, single backend (MB/s, median of {reps})",
            med[("sshfs", "read")], med[("skein", "read")], "MB/s", "higher", "≥ 1.0× (#2), ≥ 1.5× (#5)")
    r.result = f"#2 {verdict(r.speedup() >= 1.0)}, #5 {verdict(r.speedup() >= 1.5)}"
    b.rows.append(r)
    r = Row("#2 #5", f"sequential write {label} conv=fsync, single backend (MB/s, median of {reps})",
            med[("sshfs", "write")], med[("skein", "write")], "MB/s", "higher", "≥ 1.0× (#2), ≥ 1.2× (#5)")
    r.result = f"#2 {verdict(r.speedup() >= 1.0)}, #5 {verdict(r.speedup() >= 1.2)}"
    b.rows.append(r)
