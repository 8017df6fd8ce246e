"""The run: builds, makes the work directory (a tmpfs), starts the shared cluster and sshfs, runs
the selected workloads in order (a failing one is reported and the run goes on), and cleans up
whatever it started, also on failure, Ctrl-C or SIGTERM."""

import argparse
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import report, workloads
from .common import CHECKOUT, SKEIN_LOCAL, GiB, BenchError, loadavg, log, run, unmount
from .report import Row
from .systems import RES, Cluster, Sshfs, stop_proc

WORKLOADS = workloads.discover()

# Shared by every workload: repetitions of each timed run.
COMMON_FULL = dict(reps=3)
COMMON_QUICK = dict(reps=1)


class Bench:
    """What a workload works with: the parameters (p), the shared cluster (cl) with its mounts
    (mA, mB) and server 0's export (exp0), sshfs on that export (sA, and sshfs_b() for a second
    one), the work directory (work) and a directory on disk (diskdir), and what it reports (rows,
    notes, details)."""

    def __init__(self, args):
        self.args = args
        self.p = workloads.parameters(WORKLOADS, COMMON_QUICK if args.quick else COMMON_FULL,
                                      args.quick)
        if args.reps:
            self.p["reps"] = args.reps
        self.rows = []
        self.notes = []
        self.details = []    # per-run raw figures
        self.timings = {}
        self.failed = []
        self.build_dir = Path(args.build_dir).resolve()
        self.mount_bin = self.build_dir / "client" / "skein-mount"
        self.gateway_bin = self.build_dir / "gateway" / "skein-gateway"

    # -------------------------------------------------------------- set-up

    def preflight(self):
        if os.geteuid() != 0:
            raise BenchError("run as root: the bench drops the page cache and mounts a tmpfs")
        for tool in ("sshfs", "fusermount3", "dd", "du"):
            if not shutil.which(tool):
                raise BenchError(f"{tool} not found (apt-get install sshfs fuse3 coreutils)")
        if not os.path.exists("/dev/fuse"):
            raise BenchError("/dev/fuse is missing")

    def build(self):
        if self.args.no_build:
            log(f"--no-build: using the binaries in {self.build_dir}")
        else:
            if not (self.build_dir / "CMakeCache.txt").exists():
                log(f"configuring {self.build_dir} (RelWithDebInfo)")
                run(["cmake", "-S", str(CHECKOUT), "-B", str(self.build_dir), "-G", "Ninja",
                     "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DBUILD_TESTING=OFF"], timeout=600, capture=True)
            log(f"building skein-gateway and skein-mount in {self.build_dir}")
            run(["cmake", "--build", str(self.build_dir), "--target", "skein-gateway", "skein-mount"],
                timeout=3600, capture=True)
        for b in (self.gateway_bin, self.mount_bin):
            if not os.access(b, os.X_OK):
                raise BenchError(f"{b} not found; build first or drop --no-build")
        bt = ""
        cache = self.build_dir / "CMakeCache.txt"
        if cache.exists():
            m = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache.read_text(), re.M)
            bt = m.group(1) if m else ""
        self.build_type = bt or "unknown"
        if self.build_type not in ("RelWithDebInfo", "Release"):
            self.notes.append(f"WARNING: build type is {self.build_type}, figures are not representative")
        helptext = run([str(self.mount_bin), "--help"], capture=True, check=False).stdout or ""
        self.has_drop_caches = "--drop-caches" in helptext

    def make_workdir(self):
        base = Path(self.args.workdir) if self.args.workdir else Path("/tmp")
        self.work = Path(tempfile.mkdtemp(prefix="skein-bench.", dir=base))
        RES.dirs.append(self.work)
        if not self.args.on_disk:
            avail = 0
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        avail = int(line.split()[1]) * 1024
            largest = max((w.export_bytes(self.p) for w in WORKLOADS.values()), default=0)
            need = largest + 3 * GiB
            if avail < need:
                raise BenchError(f"only {avail / GiB:.1f} GiB of memory available, the tmpfs needs about "
                                 f"{need / GiB:.0f} GiB; free memory or use --on-disk")
            size = largest + 4 * GiB
            run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "skein-bench", str(self.work)])
            RES.tmpfs.append(self.work)
            self.storage = "tmpfs (RAM)"
        else:
            self.storage = f"disk ({base})"
        # The local-disk baseline for the metadata scan always lives on disk.
        self.diskdir = Path(tempfile.mkdtemp(prefix="skein-bench-disk.", dir="/var/tmp"))
        RES.dirs.append(self.diskdir)
        log(f"work directory {self.work} on {self.storage}")

    def start_main(self):
        self.cl = Cluster(self, self.work / "cluster", servers=3, mounts=2).up()
        c = self.cl
        self.mA = Path(c.mounts[0])
        self.mB = Path(c.mounts[1])
        self.exp0 = Path(c.exports[0])
        self.sA = Sshfs(self, self.work / "sshfs-a", c.ssh_ports[0], c.exports[0], c).mount()
        self.sB = None
        striped = self.mA / "striped"
        self.has_striped = striped.is_dir()
        log(f"skein mounts {c.mounts}, gateway {c.gateway}; sshfs on {self.sA.mnt} "
            f"(server 0 port {c.ssh_ports[0]}); striped layout: {'yes' if self.has_striped else 'no'}; "
            f"skein-mount --drop-caches: {'yes' if self.has_drop_caches else 'no (remount instead)'}")

    def sshfs_b(self):
        """A second sshfs mount of server 0's export (for the coherence workload), made on demand."""
        if self.sB is None:
            self.sB = Sshfs(self, self.work / "sshfs-b", self.cl.ssh_ports[0], self.cl.exports[0], self.cl).mount()
        return self.sB

    def stop_main(self):
        for s in (self.sA, self.sB):
            if s:
                s.unmount()
        for j, p in list(self.cl.remounts.items()):
            unmount(self.cl.mounts[j])
            stop_proc(p)
        run([str(SKEIN_LOCAL), "down", "--state", str(self.cl.state)], timeout=180, capture=True, check=False)
        RES.clusters.remove(self.cl.state)

    # -------------------------------------------------------------- for the workloads

    def paths(self, sub):
        """(sshfs path, skein path, export path) of SUB under server 0's export."""
        return self.sA.mnt / sub, self.mA / "srv0" / sub, self.exp0 / sub

    def rep_order(self, i):
        """Alternate which system goes first, so neither always gets the fresher machine."""
        return ("sshfs", "skein") if i % 2 == 0 else ("skein", "sshfs")

    def reps_left(self, name, t_start, done, reps):
        """False once a slow workload has used its time budget for repetitions (the first always runs)."""
        if done < reps and time.monotonic() - t_start > self.args.rep_budget:
            self.notes.append(f"{name}: ran {done} of {reps} repetitions (over the {self.args.rep_budget} s "
                              f"budget for repetitions, --rep-budget)")
            return False
        return True

    def detail(self, text):
        """A raw figure: logged now, and listed under the table."""
        self.details.append(text)
        log(text)

    # -------------------------------------------------------------- driver

    def selected(self):
        names = list(WORKLOADS)
        if self.args.only:
            names = [n for n in names if n in self.args.only]
        if self.args.skip:
            names = [n for n in names if n not in self.args.skip]
        return names

    def wait_idle(self):
        limit, cpus = self.args.wait_idle, os.cpu_count() or 1
        if not limit:
            return
        end = time.monotonic() + limit
        while loadavg() > cpus and time.monotonic() < end:
            log(f"waiting for the machine to calm down: load average {loadavg():.1f} > {cpus} CPUs")
            time.sleep(15)

    def run(self):
        self.preflight()
        self.build()
        self.wait_idle()
        self.load_start = loadavg()
        self.make_workdir()
        names = self.selected()
        on_main = [n for n in names if WORKLOADS[n].cluster == "main"]
        if on_main:
            self.start_main()
            for name in on_main:
                self.one(name)
            self.stop_main()
        for name in names:
            if WORKLOADS[name].cluster == "own":
                self.one(name)

    def one(self, name):
        w = WORKLOADS[name]
        log(f"=== {name}: {w.description}")
        t0 = time.monotonic()
        try:
            w.run(self)
        except BenchError as e:
            self.failed.append(name)
            self.rows.append(Row("", f"{name}: FAILED", None, None, "", None, sshfs_text="—",
                                 skein_text="error", note=str(e)[:500]))
            log(f"{name} failed: {e}")
        except Exception as e:  # OSError, SubprocessError, or a workload's own mistake: the run goes on
            self.failed.append(name)
            self.rows.append(Row("", f"{name}: FAILED", None, None, "", None, sshfs_text="—",
                                 skein_text="error", note=f"{type(e).__name__}: {e}"[:500]))
            log(f"{name} failed: {traceback.format_exc()}")
        self.timings[name] = time.monotonic() - t0
        log(f"=== {name} took {self.timings[name]:.0f} s")


def main():
    ap = argparse.ArgumentParser(
        prog="tests/bench/run",
        description="Benchmark skein against sshfs on the same sshd servers, side by side, in one run.",
        epilog="Workloads: " + "; ".join(f"{k}: {w.description}" for k, w in WORKLOADS.items()))
    ap.add_argument("--quick", action="store_true", help="reduced sizes, one repetition, no 60 s idle (~3 min)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=list(WORKLOADS), help="run only these workloads")
    ap.add_argument("--skip", nargs="+", metavar="NAME", choices=list(WORKLOADS), help="skip these workloads")
    ap.add_argument("--out", help="markdown results file (default tests/bench/results-<date>.md); "
                                  "a .json copy and the plots (-speedup.png, -throughput.png, "
                                  "-times.png) are written beside it")
    ap.add_argument("--reps", type=int, help="repetitions of each timed run (default 3, --quick 1)")
    ap.add_argument("--build-dir", default=os.environ.get("SKEIN_BUILD_DIR", str(CHECKOUT / "build-bench")),
                    help="build directory (default $SKEIN_BUILD_DIR or <checkout>/build-bench)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries in --build-dir as they are")
    ap.add_argument("--rep-budget", type=int, default=120, metavar="SECONDS",
                    help="no further repetitions of a workload once it has run "
                         "this long (default 120)")
    ap.add_argument("--latency-ms", type=float, default=0.5, help="added round trip for `latency` (default 0.5)")
    ap.add_argument("--sshfs-opts", default="", help="extra sshfs -o options, e.g. Ciphers=aes128-gcm@openssh.com")
    ap.add_argument("--on-disk", action="store_true", help="exports on disk (--workdir) instead of a tmpfs")
    ap.add_argument("--mount-args", default="",
                    help="extra skein-mount arguments for skein's mounts, e.g. --know-names=always "
                         "(skein-local's SKEIN_MOUNT_ARGS; remounts get them too)")
    ap.add_argument("--insecure", action="store_true",
                    help="skein's gRPC in plaintext (skein-local up --insecure), to measure what TLS costs")
    ap.add_argument("--workdir", help="where the work directory goes (default /tmp)")
    ap.add_argument("--keep", action="store_true", help="leave the work directory (and its tmpfs) in place for debugging")
    ap.add_argument("--wait-idle", type=int, default=0, metavar="SECONDS",
                    help="before starting, wait up to SECONDS for the 1-min load average to drop below the CPU count")
    ap.add_argument("--no-plots", action="store_true", help="write the table and JSON only, no PNGs")
    ap.add_argument("--plots-from", metavar="FILE.json",
                    help="draw the plots of an earlier run from its JSON copy (beside it, or as --out's "
                         "stem) and exit; nothing is run")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = ap.parse_args()
    if args.list:
        for k, w in WORKLOADS.items():
            print(f"{k:10} {w.description}")
        return 0
    if args.plots_from:
        return report.plots_from(args.plots_from, Path(args.out).with_suffix("") if args.out else None)
    out = Path(args.out) if args.out else \
        CHECKOUT / "tests" / "bench" / f"results-{datetime.datetime.now():%Y-%m-%d-%H%M}.md"

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    bench = Bench(args)
    rc = 0
    try:
        bench.run()
    except BenchError as e:
        log(f"error: {e}")
        rc = 1
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); cleaning up")
        rc = 130
    except Exception:
        log("unexpected error:\n" + traceback.format_exc())
        rc = 1
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        log("cleaning up")
        RES.save_logs = rc != 0 or bool(bench.failed)
        RES.cleanup(keep=args.keep)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
    if bench.rows:
        report.write(bench, report.header(bench), out, draw_plots=not args.no_plots)
    if rc == 0 and bench.failed:
        log(f"workloads that failed: {' '.join(bench.failed)}")
        rc = 1
    return rc
