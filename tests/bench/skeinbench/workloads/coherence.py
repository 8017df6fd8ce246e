"""coherence: how long after a change through mount A (a rewrite+close of a file, or a file
created in a directory) mount B sees it. skein: many iterations one after the other; sshfs, whose
stale window lasts seconds: several files at once, polled round-robin."""

import os
import time

from ..common import BenchError, percentile, wait_for
from ..report import Row, fmt_time, verdict

DESCRIPTION = "write+close on mount A, time until mount B sees the new content (#4)"
ORDER = 40
FULL = dict(coh_iters=200, coh_budget_s=90, coh_sshfs_files=20, coh_cap_s=30)
QUICK = dict(coh_iters=40, coh_budget_s=12, coh_sshfs_files=6, coh_cap_s=25)

# "content" (rewrite a file) and "listing" (create a file in a directory)


def _read(p):
    try:
        fd = os.open(p, os.O_RDONLY)
        try:
            return os.read(fd, 65536)
        finally:
            os.close(fd)
    except OSError:
        return None


def _write(p, data):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _listdir(p):
    try:
        return set(os.listdir(p))
    except OSError:
        return set()


def _content(i):
    # the size changes every time, so a stale cached size shows too
    return (f"v{i}:" + "x" * (100 + i % 17)).encode()


def coh_ops(kind, a, b):
    """(prime, mutate, probe) for one file (content) or one directory (listing); A writes, B reads."""
    if kind == "content":
        return (lambda: _read(b),
                lambda i: _write(a, _content(i)),
                lambda i: _read(b) == _content(i))
    return (lambda: _listdir(b),
            lambda i: _write(a / f"n{i}", b"new"),
            lambda i: f"n{i}" in _listdir(b))


def coh_setup(kind, a, b, cap):
    if kind == "content":
        _write(a, _content(0))
    else:
        a.mkdir(exist_ok=True)
        _write(a / "n0", b"new")
    _, _, probe = coh_ops(kind, a, b)
    if not wait_for(lambda: probe(0), cap, 0.002):
        raise BenchError(f"mount B never saw {b} ({kind}) within {cap} s")


def coh_sequential(kind, a, b, iters, budget, cap):
    """Iterations one after the other: B has cached the old state, A mutates (close returns at t0),
    B polls without pause until it sees the new state (t1). Returns the list of t1 - t0, and how
    many iterations were still stale at the cap."""
    coh_setup(kind, a, b, cap)
    prime, mutate, probe = coh_ops(kind, a, b)
    lat, capped = [], 0
    t_begin = time.monotonic()
    i = 0
    while i < iters and time.monotonic() - t_begin < budget:
        i += 1
        prime()
        mutate(i)
        t0 = time.perf_counter()
        while True:
            ok = probe(i)
            t1 = time.perf_counter()
            if ok or t1 - t0 > cap:
                lat.append(t1 - t0)
                capped += 0 if ok else 1
                break
    return lat, capped


def coh_parallel(kind, adir, bdir, k, cap):
    """K files (or directories) at once, for sshfs whose stale window is seconds long: B caches all,
    A mutates all, B polls all round-robin. Returns the stale times seen and how many hit the cap."""
    adir.mkdir(exist_ok=True)
    ops, t0s = [], {}
    for j in range(k):
        a, b = adir / f"{kind}{j}", bdir / f"{kind}{j}"
        coh_setup(kind, a, b, cap)
        ops.append(coh_ops(kind, a, b))
    for prime, _, _ in ops:
        prime()
    for j, (_, mutate, _) in enumerate(ops):
        mutate(1)
        t0s[j] = time.perf_counter()
    pending, seen = set(range(k)), {}
    while pending:
        for j in sorted(pending):
            ok = ops[j][2](1)
            now = time.perf_counter()
            if ok:
                seen[j] = now - t0s[j]
                pending.discard(j)
            elif now - t0s[j] > cap:
                pending.discard(j)
        time.sleep(0.002)
    return sorted(seen.values()), k - len(seen)


def run(b):
    sB = b.sshfs_b()
    cap = b.p["coh_cap_s"]
    k = b.p["coh_sshfs_files"]
    for kind, iters, budget, what in (
            ("content", b.p["coh_iters"], b.p["coh_budget_s"],
             "rewrite+close a file on A → B reads the new content"),
            ("listing", b.p["coh_iters"] // 2, b.p["coh_budget_s"] // 2,
             "create a file on A → it appears in B's listing")):
        a = b.mA / "srv0" / "bench-coh" / kind
        bb = b.mB / "srv0" / "bench-coh" / kind
        (b.mA / "srv0" / "bench-coh").mkdir(exist_ok=True)
        lat, capped = coh_sequential(kind, a, bb, iters, budget, cap)
        n = len(lat)
        p50, p99, mx = percentile(lat, 50), percentile(lat, 99), max(lat)
        fast = sum(1 for v in lat if v < 0.010)
        b.detail(f"coherence {kind} skein: {n} iterations, p50 {fmt_time(p50)}, p99 {fmt_time(p99)}, "
                 f"max {fmt_time(mx)}, {fast}/{n} within 10 ms, {capped} still stale at the {cap} s cap")
        if n < iters:
            b.notes.append(f"coherence ({kind}): skein ran {n} of {iters} iterations in its "
                           f"{budget} s time budget")
        sa = b.sA.mnt / "bench-coh-sshfs"
        sa.mkdir(exist_ok=True)
        seen, stale_n = coh_parallel(kind, sa / kind, sB.mnt / "bench-coh-sshfs" / kind, k, cap)
        sfast = sum(1 for v in seen if v < 0.010)
        b.detail(f"coherence {kind} sshfs: {k} at once, new state seen after "
                 + (", ".join(fmt_time(v) for v in seen) or "never")
                 + f"; {sfast}/{k} within 10 ms; {stale_n} still stale at the {cap} s cap")
        for pname, pct in (("p50", 50), ("p99", 99)):
            sv = percentile(seen, pct) if seen else None
            kv = percentile(lat, pct)
            r = Row("#4", f"coherence, {what}: {pname} (skein {n} in a row; sshfs {k} at once)",
                    sv, kv, "s", "lower" if not stale_n and not capped else None,
                    sshfs_text=(f"stale for {fmt_time(sv)}" if seen else "stale")
                    + (f" ({stale_n}/{k} stale > {cap} s)" if stale_n else ""),
                    skein_text=fmt_time(kv) + (f" ({capped}/{n} stale > {cap} s)" if capped else ""))
            if kind == "content" and pname == "p99":
                r.goal = "skein p99 < 10 ms"
                r.result = verdict(kv < 0.010 and not capped)
            if pname == "p50":
                r.note = (f"seen within 10 ms of the close: sshfs {sfast}/{k}, skein {fast}/{n}; "
                          f"max: sshfs {fmt_time(max(seen)) if seen else '—'}, skein {fmt_time(mx)}")
            b.rows.append(r)
