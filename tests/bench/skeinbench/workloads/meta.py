"""meta: `du -s` of a tree of small files on server 0's export: cold (sshfs remounted, skein's
caches dropped, page cache dropped), warm right after, and warm again after a minute idle;
against the same tree on this machine's disk."""

import statistics
import time
from pathlib import Path

from ..common import drop_caches, log, make_tree, run as run_cmd
from ..report import Row, fmt_time, verdict

DESCRIPTION = "du -s of a tree of small files: cold, warm, warm after 60 s idle, vs local disk (#2, #4)"
ORDER = 30
FULL = dict(meta_dirs=100, meta_per_dir=100, meta_idle_s=60)
QUICK = dict(meta_dirs=20, meta_per_dir=100, meta_idle_s=0)


def du(path):
    t0 = time.perf_counter()
    p = run_cmd(["du", "-s", str(path)], capture=True, timeout=900)
    t = time.perf_counter() - t0
    return t, int(p.stdout.split()[0])


def meta_tree(b, export):
    root = Path(export) / "bench-meta"
    if not root.exists():
        make_tree(root, b.p["meta_dirs"], b.p["meta_per_dir"])
    return root


def scan_cold(sysname, path, cluster, sshfs, mount_index=0):
    if sysname == "sshfs":
        sshfs.remount()
        how = "remount"
    else:
        how = cluster.drop_mount_caches(mount_index)
    drop_caches()
    t, kb = du(path)
    return t, kb, how


def run_meta(b, cluster, sshfs, mnt, export, reps, issue, tag, idle_s, local=True):
    """The scan rows for CLUSTER's mount MNT and SSHFS, both on EXPORT; also used by the latency
    workload (LOCAL=False: no local-disk baseline, no goals)."""
    nfiles = b.p["meta_dirs"] * b.p["meta_per_dir"]
    meta_tree(b, export)
    sp = sshfs.mnt / "bench-meta"
    kp = Path(mnt) / "srv0" / "bench-meta"
    res = {(s, k): [] for s in ("sshfs", "skein") for k in ("cold", "warm")}
    sizes = {}
    how = ""
    if local:
        # Local-disk baseline: the same tree on this machine's disk (and on the export's file
        # system). First, because it drops the page cache, dentries and inodes of every file
        # system, the mounts' included: done later it would empty what the idle scan measures.
        ld = b.diskdir / "bench-meta"
        if not ld.exists():
            make_tree(ld, b.p["meta_dirs"], b.p["meta_per_dir"])
        drop_caches()
        lc, _ = du(ld)
        lw = statistics.median([du(ld)[0] for _ in range(3)])
        ew = statistics.median([du(Path(export) / "bench-meta")[0] for _ in range(3)])
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left(f"meta{tag}", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            path = sp if sysname == "sshfs" else kp
            t, kb, h = scan_cold(sysname, path, cluster, sshfs)
            if sysname == "skein":
                how = h
            res[(sysname, "cold")].append(t)
            t2, kb2 = du(path)
            res[(sysname, "warm")].append(t2)
            sizes[sysname] = (kb, kb2)
        b.detail(f"meta{tag} rep {i + 1}: " + ", ".join(f"{s} {k} {fmt_time(v[-1])}" for (s, k), v in res.items()))
    med = {k: statistics.median(v) for k, v in res.items()}
    if len({v for pair in sizes.values() for v in pair}) != 1:
        b.notes.append(f"meta{tag}: du -s totals (KiB; cold, warm) differ: {sizes}. SFTP v3 carries no "
                       f"block count, so each client makes st_blocks up its own way.")
    label = f"{nfiles} files in {b.p['meta_dirs']} dirs"
    if local:
        b.detail(f"meta: local disk ({b.diskdir}) cold {fmt_time(lc)}, warm {fmt_time(lw)}; "
                 f"export dir ({b.storage}) warm {fmt_time(ew)}")
        b.rows.append(Row(issue, f"du -s {label}: local disk baseline, cold / warm (no sshfs/skein)",
                          None, None, "s", None, sshfs_text="—",
                          skein_text=f"{fmt_time(lc)} / {fmt_time(lw)}",
                          note=f"tree on {b.diskdir}; the export dir itself ({b.storage}) warm: {fmt_time(ew)}"))
    r = Row(issue, f"du -s {label}{tag}: cold (time, median of {reps})", med[("sshfs", "cold")],
            med[("skein", "cold")], "s", "lower",
            note=f"sshfs remounted; skein: {how}; page cache dropped")
    if local:
        r.goal = "≤ sshfs"
        r.result = verdict(r.speedup() >= 1.0)
    b.rows.append(r)
    r = Row(issue, f"du -s {label}{tag}: warm, right after (time, median of {reps})", med[("sshfs", "warm")],
            med[("skein", "warm")], "s", "lower")
    if local:
        within = med[("skein", "warm")] / lw
        r.goal = "≤ sshfs and ≤ 3× local disk warm"
        r.result = verdict(r.speedup() >= 1.0 and within <= 3.0)
        r.note = f"skein warm = {within:.1f}× local disk warm ({fmt_time(lw)})"
    b.rows.append(r)
    if idle_s:
        # Both warm at the start of the idle time: a rep's cold scan drops the page cache of
        # every file system, so whichever ran its cold scan last emptied the other's.
        du(sp)
        du(kp)
        log(f"meta: idling {idle_s} s before the warm-after-idle scan")
        time.sleep(idle_s)
        ts, _ = du(sp)
        tk, _ = du(kp)
        b.detail(f"meta{tag} after {idle_s} s idle: sshfs {fmt_time(ts)}, skein {fmt_time(tk)}")
        r = Row(issue, f"du -s {label}{tag}: warm after {idle_s} s idle (time)", ts, tk, "s", "lower",
                goal="skein stays warm: ≤ 2× its warm time and ≤ sshfs",
                note=f"skein {tk / med[('skein', 'warm')]:.1f}× its warm time; sshfs "
                     f"{ts / med[('sshfs', 'warm')]:.1f}× its warm time, {ts / med[('sshfs', 'cold')]:.1f}× its cold time")
        r.result = verdict(tk <= 2 * med[("skein", "warm")] and tk <= ts)
        b.rows.append(r)
    elif local:
        b.notes.append("meta: the warm-after-60-s-idle scan was skipped (--quick)")


def run(b):
    run_meta(b, b.cl, b.sA, b.mA, b.exp0, b.p["reps"], "#2 #4", "", b.p["meta_idle_s"])
