"""mpistage: `skein-mpi stage-in` on 4 ranks copying a tree from a skein mount to a local directory
(on the bench's tmpfs), against `cp -r` and `rsync -a` from the same mount and `rsync -a` over ssh
from the same sshd, the same data in the same run: (a) many small files, (b) one large file (#18).
Then (c) `skein-mpi stage-out` of small files from the tmpfs to the mount, against `cp -r`, `cp -a`
and `rsync -a` to the mount (no goal).
"""

import os
import statistics
import time

from ..common import BenchError, GiB, MiB, drop_caches, write_pattern_file
from ..common import run as sh
from ..report import Row, fmt_time, verdict

DESCRIPTION = "skein-mpi stage-in (4 ranks) against cp -r, rsync -a and rsync over ssh (#18)"
ORDER = 61
FULL = dict(mpistage_small=10000, mpistage_small_size=4096, mpistage_big=2 * GiB, mpistage_out=2000)
QUICK = dict(mpistage_small=1000, mpistage_small_size=4096, mpistage_big=256 * MiB, mpistage_out=500)
SYSTEMS = ("skein-mpi", "cp", "rsync", "rsync-ssh")
OUT_SYSTEMS = ("skein-mpi", "cp -r", "cp -a", "rsync -a")


def export_bytes(p):
    # The sources in the export, and one copy at a time in the work directory (the same tmpfs);
    # the stage-out's source there and one copy at a time in the export.
    return 2 * (p["mpistage_big"] + (p["mpistage_small"] + p["mpistage_out"]) * p["mpistage_small_size"])


def _make_small(d, n, size):
    data = os.urandom(size)
    for k in range(n):
        sub = d / f"d{k // 1000:03d}"
        if k % 1000 == 0:
            sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{k:05d}").write_bytes(data)


def _copy(b, system, src_mount, src_export, dst):
    """Copies the tree SRC to DST with SYSTEM; returns the wall time."""
    c = b.cl
    if system == "skein-mpi":
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
               str(b.build_dir / "client" / "skein-mpi"), "stage-in", str(src_mount), str(dst)]
    elif system == "cp":
        cmd = ["cp", "-r", str(src_mount), str(dst)]
    elif system == "rsync":
        cmd = ["rsync", "-a", f"{src_mount}/", f"{dst}/"]
    else:
        ssh = (f"ssh -F /dev/null -p {c.ssh_ports[0]} -i {c.key} -o IdentitiesOnly=yes -o BatchMode=yes "
               f"-o UserKnownHostsFile={c.known_hosts} -o StrictHostKeyChecking=yes "
               f"-o GlobalKnownHostsFile=/dev/null")
        cmd = ["rsync", "-a", "-e", ssh, f"{c.user}@127.0.0.1:{src_export}/", f"{dst}/"]
    t0 = time.perf_counter()
    sh(cmd, timeout=3600, capture=True)
    return time.perf_counter() - t0


def _mpi_start(b):
    """Seconds of skein-mpi's time that are mpirun's and MPI's own start and end: the median of
    three stage-ins of an empty tree, in the same run."""
    empty, dst = b.work / "mpistage-empty", b.work / "mpistage-empty-dst"
    empty.mkdir(parents=True, exist_ok=True)
    times = []
    for _ in range(3):
        sh(["rm", "-rf", str(dst)], timeout=60)
        t0 = time.perf_counter()
        sh(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
            str(b.build_dir / "client" / "skein-mpi"), "stage-in", str(empty), str(dst)], timeout=120,
           capture=True)
        times.append(time.perf_counter() - t0)
    sh(["rm", "-rf", str(dst), str(empty)], timeout=60)
    return statistics.median(times)


def _alternating(b, systems, what, one):
    """Times one(system, rep) for each of SYSTEMS, the order alternating between repetitions, for
    b.p["reps"] repetitions or until the workload's time budget is spent. Returns the times by
    system and the repetitions done."""
    reps = b.p["reps"]
    res = {s: [] for s in systems}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("mpistage", t_start, i, reps):
            reps = i
            break
        for system in (systems if i % 2 == 0 else tuple(reversed(systems))):
            res[system].append(one(system, i))
        b.detail(f"mpistage {what} rep {i + 1}: " + ", ".join(f"{s} {fmt_time(v[-1])}" for s, v in res.items()))
    return res, reps


def _one(b, what, name, make, count_bytes, mpi_start):
    """One row: the tree NAME made by MAKE(dir) in server 0's export, copied by each system."""
    src_export = b.exp0 / name
    make(src_export)
    src_mount = b.mA / "srv0" / name
    dst = b.work / f"mpistage-dst-{name}"

    def one(system, _rep):
        sh(["rm", "-rf", str(dst)], timeout=600)
        drop_caches()
        b.cl.drop_mount_caches(0)
        took = _copy(b, system, src_mount, src_export, dst)
        got = int(sh(["du", "-sb", "--apparent-size", str(dst)], capture=True).stdout.split()[0])
        if got < count_bytes:
            raise BenchError(f"{system} copied {got} bytes of {count_bytes} ({what})")
        return took

    res, reps = _alternating(b, SYSTEMS, what, one)
    sh(["rm", "-rf", str(dst), str(src_export)], timeout=600)
    med = {s: statistics.median(v) for s, v in res.items()}
    r = Row("#18", f"stage-in of {what} from a skein mount to a local dir (time, median of {reps}; "
                   f"cp -r on the mount against skein-mpi on 4 ranks)", med["cp"], med["skein-mpi"], "s",
            "lower", "≥ 2× cp -r on the mount",
            note=(f"cp -r {fmt_time(med['cp'])}, rsync -a on the mount {fmt_time(med['rsync'])} "
                  f"({med['rsync'] / med['skein-mpi']:.2f}×), rsync over ssh from the sshd "
                  f"{fmt_time(med['rsync-ssh'])} ({med['rsync-ssh'] / med['skein-mpi']:.2f}×), "
                  f"skein-mpi {fmt_time(med['skein-mpi'])}, of which {fmt_time(mpi_start)} are "
                  f"mpirun's and MPI's own start and end (a stage-in of an empty tree)"),
            baseline="cp -r on the skein mount")
    r.result = verdict(r.speedup() is not None and r.speedup() >= 2)
    b.rows.append(r)


def _stage_out(b, n, size):
    """One row: N files of SIZE made on the bench's tmpfs, copied to a fresh directory of the
    mount by each system. Nothing to drop: the source is on a tmpfs, and what is written goes to
    the server as it is written."""
    src = b.work / "mpistage-out-src"
    _make_small(src, n, size)

    def one(system, rep):
        name = f"bench-stageout-{system.replace(' ', '')}-{rep}"
        dst, exported = b.mA / "srv0" / name, b.exp0 / name
        if system == "skein-mpi":
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                   str(b.build_dir / "client" / "skein-mpi"), "stage-out", str(src), str(dst)]
        elif system == "rsync -a":
            cmd = ["rsync", "-a", f"{src}/", f"{dst}/"]
        else:
            cmd = system.split() + [str(src), str(dst)]
        sh(["sync"], timeout=600)
        t0 = time.perf_counter()
        sh(cmd, timeout=3600, capture=True)
        took = time.perf_counter() - t0
        got = int(sh(["du", "-sb", "--apparent-size", str(exported)], capture=True).stdout.split()[0])
        if got < n * size:
            raise BenchError(f"{system} wrote {got} bytes of {n * size} to the export (stage-out)")
        sh(["rm", "-rf", str(exported)], timeout=600)  # on the server: one copy at a time
        return took

    res, reps = _alternating(b, OUT_SYSTEMS, f"stage-out of {n:,} files", one)
    sh(["rm", "-rf", str(src)], timeout=600)
    med = {s: statistics.median(v) for s, v in res.items()}
    b.rows.append(Row(
        "#18", f"stage-out of {n:,} files of {size // 1024} KiB from a local dir to a skein mount "
               f"(time, median of {reps}; cp -r against skein-mpi on 4 ranks)",
        med["cp -r"], med["skein-mpi"], "s", "lower", "",
        note=(f"skein-mpi keeps modes and mtimes and renames each file into place; of the others "
              f"cp -a {fmt_time(med['cp -a'])} ({med['cp -a'] / med['skein-mpi']:.2f}×) and rsync -a "
              f"{fmt_time(med['rsync -a'])} ({med['rsync -a'] / med['skein-mpi']:.2f}×) keep them too, "
              f"cp -r {fmt_time(med['cp -r'])} does not"), baseline="cp -r on the skein mount"))


def run(b):
    mpi = b.build_dir / "client" / "skein-mpi"
    if not mpi.exists():
        raise BenchError(f"{mpi} is not built (ninja skein-mpi; needs libopenmpi-dev)")
    n, size, big = b.p["mpistage_small"], b.p["mpistage_small_size"], b.p["mpistage_big"]

    def make_big(d):
        d.mkdir(parents=True, exist_ok=True)
        write_pattern_file(d / "big", big)

    mpi_start = _mpi_start(b)
    _one(b, f"{n:,} files of {size // 1024} KiB", "bench-mpistage-small",
         lambda d: _make_small(d, n, size), n * size, mpi_start)
    _one(b, f"one {big // MiB} MiB file", "bench-mpistage-big", make_big, big, mpi_start)
    _stage_out(b, b.p["mpistage_out"], size)
