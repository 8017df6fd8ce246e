"""create: many 4 KiB files created one after the other in a fresh directory of server 0's
export (open O_CREAT|O_EXCL, write, close), through sshfs and through skein."""

import os
import statistics
import time

from ..common import BenchError, drop_caches, run as run_cmd
from ..report import Row, fmt_time, verdict

DESCRIPTION = "create many 4 KiB files in a fresh directory (#2)"
ORDER = 20
FULL = dict(create_files=2000)
QUICK = dict(create_files=300)


def create_files(d, count):
    """Create COUNT 4 KiB files in fresh directory D; seconds."""
    data = b"c" * 4096
    os.mkdir(d)
    drop_caches()
    t0 = time.perf_counter()
    for i in range(count):
        fd = os.open(os.path.join(d, f"f{i:05d}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise BenchError("short write")
        finally:
            os.close(fd)
    return time.perf_counter() - t0


def run_create(b, sysmap, reps, issue, tag):
    """The create rows for the directories SYSMAP ({"sshfs": dir, "skein": dir}); also used by
    the latency workload, with TAG naming its relays."""
    count = b.p["create_files"]
    res = {"sshfs": [], "skein": []}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left(f"create{tag}", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            base = sysmap[sysname]
            d = base / f"bench-create-{i}"
            t = create_files(d, count)
            res[sysname].append(t)
            run_cmd(["rm", "-rf", str(d)], timeout=600)   # (shutil.rmtree trusts fstat == lstat)
        b.detail(f"create{tag} rep {i + 1}: " + ", ".join(f"{s} {fmt_time(v[-1])}" for s, v in res.items()))
    med = {k: statistics.median(v) for k, v in res.items()}
    # #19's goal: 2,000 creates at least 1.5x sshfs's rate, on loopback and with the relay.
    r = Row(f"{issue} #19", f"create {count} files of 4 KiB{tag} (time, median of {reps})",
            med["sshfs"], med["skein"], "s", "lower", "≥ 1.5× sshfs (#19)",
            note=f"sshfs {count / med['sshfs']:.0f} files/s, skein {count / med['skein']:.0f} files/s")
    r.result = verdict(med["sshfs"] >= 1.5 * med["skein"])
    b.rows.append(r)


def run(b):
    sp, kp, _ = b.paths("")
    run_create(b, {"sshfs": sp, "skein": kp}, b.p["reps"], "#2", "")
