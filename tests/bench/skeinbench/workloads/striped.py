"""striped: one file written and read through skein's striped layout (over all 3 servers), against
sshfs on server 0 alone."""

import statistics
import time

from ..common import GiB, MiB, drop_caches, timed, write_pattern_file
from ..report import Row, fmt_bytes, verdict

DESCRIPTION = "sequential write and read of one file striped over 3 backends vs sshfs on one server (#5)"
ORDER = 50
FULL = dict(striped_bytes=1 * GiB)
QUICK = dict(striped_bytes=128 * MiB)


def export_bytes(p):
    return 2 * p["striped_bytes"]


def run(b):
    if not b.has_striped:
        b.rows.append(Row("#5", "striped over 3 backends: sequential read", None, None, "", None,
                          "≥ 2× sshfs on one server", "n/a", sshfs_text="—",
                          skein_text=f"n/a ({b.mA}/striped does not exist)"))
        return
    n = b.p["striped_bytes"]
    reps = b.p["reps"]
    sp, _, ep = b.paths("bench-striped")
    ep.mkdir(exist_ok=True)
    src = write_pattern_file(ep / "read-src", n)
    kd = b.mA / "striped" / "bench-striped"
    kd.mkdir(exist_ok=True)
    res = {("sshfs", "write"): [], ("skein", "write"): [], ("sshfs", "read"): [], ("skein", "read"): []}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("striped", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            d = sp if sysname == "sshfs" else kd
            f = d / "stream"
            drop_caches()
            t = timed(["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={n // MiB}", "conv=fsync",
                       "status=none"])
            res[(sysname, "write")].append(n / t / 1e6)
            if sysname == "sshfs":
                f.unlink()
                rf = d / "read-src"
            else:
                # the striped file just written: random content is not needed, SSH does not compress
                rf = f
            drop_caches()
            t = timed(["dd", f"if={rf}", "of=/dev/null", "bs=1M", "status=none"])
            res[(sysname, "read")].append(n / t / 1e6)
            if sysname == "skein":
                f.unlink()
        b.detail(f"striped rep {i + 1}: " + ", ".join(f"{s} {p} {res[(s, p)][-1]:.0f} MB/s" for s, p in res))
    src.unlink()
    med = {k: statistics.median(v) for k, v in res.items()}
    label = fmt_bytes(n)
    r = Row("#5", f"striped over 3 backends: sequential read {label} vs sshfs from one server "
                  f"(MB/s, median of {reps})", med[("sshfs", "read")], med[("skein", "read")], "MB/s", "higher",
            "≥ 2× sshfs")
    r.result = verdict(r.speedup() >= 2.0)
    b.rows.append(r)
    b.rows.append(Row("#5", f"striped over 3 backends: sequential write {label} conv=fsync vs sshfs to one "
                            f"server (MB/s, median of {reps})", med[("sshfs", "write")],
                      med[("skein", "write")], "MB/s", "higher"))
