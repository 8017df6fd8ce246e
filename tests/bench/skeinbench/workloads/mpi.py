"""mpi: one file read on 2 simulated nodes (the cluster's two mounts, 2 ranks each): plain reads on
both nodes at once against `skein-mpi bcast` then the same reads (served from the page caches);
wall time and the gateway's bytes served (skeinctl's bytes_read), 1x against Nx (#18). Then the
same for a tree of small files (`cat` of every file on both nodes at once)."""

import json
import os
import statistics
import time

from ..common import BenchError, GiB, MiB, make_tree, write_pattern_file
from ..common import run as sh
from ..report import Row, fmt_bytes, verdict

DESCRIPTION = "bcast into 2 nodes' page caches against plain reads on each (#18)"
ORDER = 60
FULL = dict(mpi_bytes=1 * GiB, mpi_tree_files=2000)
QUICK = dict(mpi_bytes=256 * MiB, mpi_tree_files=500)
TREE_FILE = 4096


def export_bytes(p):
    return p["mpi_bytes"] + p["mpi_tree_files"] * TREE_FILE


def _bytes_read(b):
    env = dict(os.environ, **{k: v for k, v in b.cl.env.items() if k.startswith("SKEIN_")})
    out = sh([str(b.build_dir / "client" / "skeinctl"), "--json", "namespaces", "list"], env=env,
              capture=True, timeout=60)
    for n in json.loads(out.stdout)["namespaces"]:
        if n["name"] == "default":
            return int(n.get("bytes_read", 0))
    raise BenchError("skeinctl lists no namespace 'default'")


def _read_both(files):
    """Reads every file at once (one dd each); returns the wall time."""
    import subprocess
    t = time.monotonic()
    procs = [subprocess.Popen(["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"]) for f in files]
    for p in procs:
        if p.wait() != 0:
            raise BenchError("dd failed")
    return time.monotonic() - t


def _cold(b, fn):
    """Drops both mounts' caches and runs FN, which returns a time; returns that time and the
    gateway's bytes served meanwhile."""
    b.cl.drop_mount_caches(0)
    b.cl.drop_mount_caches(1)
    before = _bytes_read(b)
    t = fn()
    return t, _bytes_read(b) - before


def _bcast(b, mpi, node_map, path):
    """`skein-mpi bcast PATH` on 4 ranks, the two mounts as two nodes; returns the wall time."""
    t = time.monotonic()
    sh(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x", f"SKEIN_MPI_NODE_MAP={node_map}",
        str(mpi), "bcast", "--quiet", str(path)], timeout=900, capture=True)
    return time.monotonic() - t


def _cat_trees(trees):
    """Reads every file of each tree (`find | xargs cat`: few processes, so that their start does
    not hide the reads), the trees at once; returns the wall time."""
    import subprocess
    t = time.monotonic()
    procs = [subprocess.Popen(["sh", "-c", 'find "$1" -type f -print0 | xargs -0 cat', "sh", str(d)],
                              stdout=subprocess.DEVNULL) for d in trees]
    for p in procs:
        if p.wait() != 0:
            raise BenchError("cat of a tree failed")
    return time.monotonic() - t


def _tree(b, mpi, node_map):
    """Plain reads of a tree of small files on both nodes at once against bcast and then the same
    reads; rows without a goal (#18's goals are the large file's)."""
    files, reps = b.p["mpi_tree_files"], b.p["reps"]
    _, kp, ep = b.paths("bench-mpi-tree")
    make_tree(str(ep), 20, files // 20, TREE_FILE)
    ta = kp
    tb = b.mB / ta.relative_to(b.mA)
    n = (files // 20) * 20 * TREE_FILE
    res = {"plain": [], "bcast": [], "bcast_only": [], "plain_bytes": [], "bcast_bytes": []}
    for i in range(reps):
        t, served = _cold(b, lambda: _cat_trees([ta, tb]))
        res["plain"].append(t)
        res["plain_bytes"].append(served)
        bcast_only = []

        def bcast_and_reads():
            # The reads after the bcast count too: the gateway bytes of the row are of both.
            bcast_only.append(_bcast(b, mpi, node_map, ta))
            return bcast_only[0] + _cat_trees([ta, tb])

        t, served = _cold(b, bcast_and_reads)
        res["bcast_only"].append(bcast_only[0])
        res["bcast"].append(t)
        res["bcast_bytes"].append(served)
        b.detail(f"mpi tree rep {i + 1}: two plain {res['plain'][-1]:.2f} s ({res['plain_bytes'][-1] / n:.2f}x), "
                 f"bcast {res['bcast_only'][-1]:.2f} s, bcast+reads {res['bcast'][-1]:.2f} s "
                 f"({res['bcast_bytes'][-1] / n:.2f}x)")
    import shutil
    shutil.rmtree(ep)
    med = {k: statistics.median(v) for k, v in res.items()}
    label = f"{files:,} files of 4 KiB"
    b.rows.append(Row("#18", f"{label} on 2 nodes: plain reads (cat) against bcast + reads (s, median of {reps})",
                      med["plain"], med["bcast"], "s", "lower", "",
                      note=f"the bcast alone: {med['bcast_only']:.2f} s", baseline="plain reads"))
    b.rows.append(Row("#18", f"{label} on 2 nodes: gateway bytes served, plain against bcast (× the files' size)",
                      med["plain_bytes"] / n, med["bcast_bytes"] / n, "× size", "lower", "",
                      baseline="plain reads"))


def run(b):
    mpi = b.build_dir / "client" / "skein-mpi"
    if not mpi.exists():
        raise BenchError(f"{mpi} is not built (ninja skein-mpi; needs libopenmpi-dev)")
    n = b.p["mpi_bytes"]
    reps = b.p["reps"]
    _, kp, ep = b.paths("bench-mpi")
    ep.mkdir(exist_ok=True)
    write_pattern_file(ep / "input", n)
    fa = kp / "input"
    fb = b.mB / fa.relative_to(b.mA)
    node_map = f"a={b.mA},a={b.mA},b={b.mB},b={b.mB}"
    res = {"one": [], "plain": [], "bcast": [], "plain_bytes": [], "bcast_bytes": []}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("mpi", t_start, i, reps):
            reps = i
            break
        # One node's plain read: the baseline.
        b.cl.drop_mount_caches(0)
        b.cl.drop_mount_caches(1)
        res["one"].append(_read_both([fa]))
        # Both nodes, plain.
        t, served = _cold(b, lambda: _read_both([fa, fb]))
        res["plain"].append(t)
        res["plain_bytes"].append(served)
        # Both nodes, bcast first.
        t, served = _cold(b, lambda: _bcast(b, mpi, node_map, fa) + _read_both([fa, fb]))
        res["bcast"].append(t)
        res["bcast_bytes"].append(served)
        b.detail(f"mpi rep {i + 1}: one node {res['one'][-1]:.2f} s, two plain {res['plain'][-1]:.2f} s "
                 f"({res['plain_bytes'][-1] / n:.2f}x), bcast+reads {res['bcast'][-1]:.2f} s "
                 f"({res['bcast_bytes'][-1] / n:.2f}x)")
    (ep / "input").unlink()
    med = {k: statistics.median(v) for k, v in res.items()}
    label = fmt_bytes(n)
    r = Row("#18", f"{label} on 2 nodes: plain reads against bcast + reads (s, median of {reps})",
            med["plain"], med["bcast"], "s", "lower",
            "bcast ≤ 1.25× one node's plain read", note=f"one node's plain read: {med['one']:.2f} s",
            baseline="plain reads")
    r.result = verdict(med["bcast"] <= 1.25 * med["one"])
    b.rows.append(r)
    r = Row("#18", f"{label} on 2 nodes: gateway bytes served, plain against bcast (× file size)",
            med["plain_bytes"] / n, med["bcast_bytes"] / n, "× size", "lower", "bcast 1× (within 1%)",
            baseline="plain reads")
    r.result = verdict(abs(med["bcast_bytes"] / n - 1) <= 0.01)
    b.rows.append(r)
    _tree(b, mpi, node_map)
