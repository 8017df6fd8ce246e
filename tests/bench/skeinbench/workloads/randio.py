"""randio: random 4 KiB reads and writes of one 256 MiB file of server 0's export with fio (psync,
one job), through sshfs and through skein; and, for skein, how many bytes the gateway fetched from
its backend per byte fio read (the Admin API's per-backend bytes_read, before and after).

Reads: the page cache is dropped, then fio reads `rand_io_bytes` at random 4 KiB offsets (fixed
seed); a second pass of the same offsets right after must come from the page cache. Writes: fio
writes `rand_io_bytes` at random 4 KiB offsets with a checksum header in every block and fsyncs at
the end; then fio checks every block it wrote in the file on the export itself (verify_only), so
the figure counts only data that reached the server."""

import json
import os
import shutil
import statistics
import time

from ..common import MiB, BenchError, drop_caches, run as run_cmd, write_pattern_file
from ..report import Row, verdict

DESCRIPTION = "random 4 KiB reads and writes of a 256 MiB file, fio psync, IOPS; gateway bytes per byte read (#19)"
ORDER = 15
FULL = dict(rand_file_bytes=256 * MiB, rand_io_bytes=32 * MiB)
QUICK = dict(rand_file_bytes=256 * MiB, rand_io_bytes=8 * MiB)


def export_bytes(p):
    return 2 * p["rand_file_bytes"]


def fio(path, rw, size, io_size, extra=()):
    """Runs one fio job on PATH; its JSON job record."""
    cmd = ["fio", "--name=rand", f"--filename={path}", f"--size={size}", f"--io_size={io_size}",
           f"--rw={rw}", "--bs=4k", "--ioengine=psync", "--numjobs=1", "--randrepeat=1",
           "--invalidate=0", "--output-format=json", *extra]
    p = run_cmd(cmd, timeout=900, capture=True, check=False)
    if p.returncode != 0:
        raise BenchError(f"fio {rw} on {path} failed: {(p.stderr or p.stdout or '').strip()[-500:]}")
    out = p.stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    if job.get("error"):
        raise BenchError(f"fio {rw} on {path}: error {job['error']}")
    return job


def gateway_bytes_read(b):
    """Bytes the gateway has read from all its backends, from skeinctl's JSON."""
    ctl = b.build_dir / "client" / "skeinctl"
    if not os.access(ctl, os.X_OK):
        raise BenchError(f"{ctl} is missing: the gateway's bytes per byte read cannot be counted")
    env = dict(os.environ, **b.cl.env)
    p = run_cmd([str(ctl), "--json", "backends", "list"], capture=True, env=env, check=False)
    if p.returncode != 0:
        raise BenchError(f"skeinctl backends list failed: {(p.stderr or p.stdout or '').strip()[-300:]}")
    data = json.loads(p.stdout)
    rows = data if isinstance(data, list) else data.get("backends", [])
    if not rows or any("bytes_read" not in r for r in rows):
        raise BenchError(f"skeinctl backends list gave no bytes_read: {p.stdout.strip()[-300:]}")
    return sum(int(r["bytes_read"]) for r in rows)


def run(b):
    if not shutil.which("fio"):
        raise BenchError("fio not found (apt-get install fio; deploy/install-deps installs it)")
    size, io = b.p["rand_file_bytes"], b.p["rand_io_bytes"]
    reps = b.p["reps"]
    sp, kp, ep = b.paths("bench-rand")
    ep.mkdir(exist_ok=True)
    write_pattern_file(ep / "read-src", size)
    res = {(s, k): [] for s in ("sshfs", "skein") for k in ("read", "reread", "write")}
    per_byte = []
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("randio", t_start, i, reps):
            reps = i
            break
        for sysname in b.rep_order(i):
            d = sp if sysname == "sshfs" else kp
            drop_caches()
            before = gateway_bytes_read(b) if sysname == "skein" else None
            job = fio(d / "read-src", "randread", size, io)
            res[(sysname, "read")].append(job["read"]["iops"])
            if before is not None:
                per_byte.append((gateway_bytes_read(b) - before) / job["read"]["io_bytes"])
            job = fio(d / "read-src", "randread", size, io)
            res[(sysname, "reread")].append(job["read"]["iops"])

            name = f"write-{sysname}"
            (ep / name).unlink(missing_ok=True)
            write_pattern_file(ep / name, size)
            drop_caches()
            job = fio(d / name, "randwrite", size, io,
                      ["--end_fsync=1", "--verify=crc32c", "--do_verify=0", "--verify_state_save=0"])
            res[(sysname, "write")].append(job["write"]["iops"])
            # Every block fio wrote, checked in the export itself: on the server after the fsync.
            fio(ep / name, "randwrite", size, io,
                ["--verify=crc32c", "--verify_only=1", "--verify_state_save=0"])
            (ep / name).unlink()
        b.detail(f"randio rep {i + 1}: " + ", ".join(f"{s} {k} {v[-1]:.0f} IOPS" for (s, k), v in res.items())
                 + (f"; skein gateway bytes per byte read {per_byte[-1]:.2f}" if per_byte else ""))
    (ep / "read-src").unlink()
    med = {k: statistics.median(v) for k, v in res.items()}
    n_ios = io // 4096
    r = Row("#19", f"random 4 KiB reads of a {size // MiB} MiB file, fio psync, {n_ios} reads, page cache "
                   f"dropped (IOPS, median of {reps})", med[("sshfs", "read")], med[("skein", "read")],
            "IOPS", "higher", "≥ 1.5× sshfs")
    r.result = verdict(r.speedup() >= 1.5)
    b.rows.append(r)
    b.rows.append(Row("#19", f"the same {n_ios} random reads again, right after (IOPS, median of {reps})",
                      med[("sshfs", "reread")], med[("skein", "reread")], "IOPS", "higher",
                      note="skein keeps the file's pages while it is unchanged and serves the second "
                           "pass from the page cache; sshfs (without -o kernel_cache) drops a file's "
                           "pages at each open and reads again from the server"))
    r = Row("#19", f"random 4 KiB writes to a {size // MiB} MiB file, fio psync, {n_ios} writes + fsync, "
                   f"verified on the server (IOPS, median of {reps})", med[("sshfs", "write")],
            med[("skein", "write")], "IOPS", "higher", "≥ 1.5× sshfs")
    r.result = verdict(r.speedup() >= 1.5)
    b.rows.append(r)
    if per_byte:
        pb = statistics.median(per_byte)
        r = Row("#19", "skein: bytes the gateway fetched from the backend per byte read, random 4 KiB reads",
                None, pb, "", None, "≤ 1.1", sshfs_text="—", skein_text=f"{pb:.2f}")
        r.result = verdict(pb <= 1.1)
        b.rows.append(r)
