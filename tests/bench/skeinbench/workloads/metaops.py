"""metaops: two processes at once, each in its own fresh directory of server 0's export, going
through the phases of a metadata-heavy job on `meta_ops_files` empty files each: create (open
O_CREAT|O_EXCL, close), open+close, stat, remove. Both start each phase together (a barrier); a
phase's rate is all files of both processes over the time until the slower one is done."""

import multiprocessing
import os
import queue
import statistics
import time

from ..common import BenchError, drop_caches
from ..report import Row, verdict

DESCRIPTION = "two processes: create, open+close, stat, remove files in their own dirs, ops/s (#19)"
ORDER = 24
FULL = dict(meta_ops_files=1000)
QUICK = dict(meta_ops_files=300)

PHASES = ("create", "open+close", "stat", "remove")


def worker(d, n, barrier, out):
    try:
        names = [os.path.join(d, f"f{i:05d}") for i in range(n)]
        times = []
        for phase in PHASES:
            barrier.wait()
            t0 = time.perf_counter()
            for p in names:
                if phase == "create":
                    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                elif phase == "open+close":
                    os.close(os.open(p, os.O_RDONLY))
                elif phase == "stat":
                    os.stat(p)
                else:
                    os.unlink(p)
            times.append((t0, time.perf_counter()))
        out.put((d, times, None))
    except Exception as e:  # reported to the parent; the other worker stops waiting at the barrier
        barrier.abort()
        out.put((d, None, f"{type(e).__name__}: {e}"))


def one_run(base, n, procs=2):
    dirs = [base / f"bench-metaops-{k}" for k in range(procs)]
    for d in dirs:
        d.mkdir()
    drop_caches()
    # A worker that fails aborts the barrier, and one that hangs (a stuck mount) times out at it:
    # neither leaves the other waiting, nor the run.
    barrier = multiprocessing.Barrier(procs, timeout=600)
    out = multiprocessing.Queue()
    ps = [multiprocessing.Process(target=worker, args=(str(d), n, barrier, out), daemon=True)
          for d in dirs]
    try:
        for p in ps:
            p.start()
        try:
            got = [out.get(timeout=1800) for _ in ps]
        except queue.Empty:
            raise BenchError(f"metaops in {base}: a worker gave no result within 1800 s")
    finally:
        for p in ps:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    errs = [e for _, _, e in got if e]
    if errs:
        raise BenchError(f"metaops in {base}: {errs}")
    rates = {}
    for k, phase in enumerate(PHASES):
        start = min(t[k][0] for _, t, _ in got)
        end = max(t[k][1] for _, t, _ in got)
        rates[phase] = procs * n / (end - start)
    for d in dirs:
        d.rmdir()
    return rates


def run(b):
    n = b.p["meta_ops_files"]
    reps = b.p["reps"]
    sp, kp, _ = b.paths("")
    res = {(s, ph): [] for s in ("sshfs", "skein") for ph in PHASES}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("metaops", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            rates = one_run(sp if sysname == "sshfs" else kp, n)
            for ph, v in rates.items():
                res[(sysname, ph)].append(v)
        b.detail(f"metaops rep {i + 1}: " + ", ".join(f"{s} {ph} {v[-1]:.0f}/s" for (s, ph), v in res.items()))
    med = {k: statistics.median(v) for k, v in res.items()}
    for ph in PHASES:
        r = Row("#19", f"2 processes × {n} empty files in their own dirs: {ph} (ops/s, median of {reps})",
                med[("sshfs", ph)], med[("skein", ph)], "ops/s", "higher", "≥ 1.5× sshfs")
        r.result = verdict(r.speedup() >= 1.5)
        b.rows.append(r)
