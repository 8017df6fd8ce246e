"""jobs: a job namespace's life as Slurm's burst buffer and prolog drive it, and staging.

- create + mount: `skeinctl ns create` then `skein-mount --job` until the mount is there; and
  unmount + destroy: `fusermount3 -u` then `skeinctl ns destroy` until it has answered. p50 and
  p95 over `jobs_cycles`.
- staging: a big file and many small files copied by the gateway (`skeinctl stage in --wait`)
  from server 0's export into a job namespace striped over the scratch backends, against the
  two ways sites stage without skein: `rsync -a` over ssh from the export's directory to server
  1, and `cp -r` on an sshfs mount of server 0 (both ends remote, as for the gateway).
"""

import json
import os
import statistics
import time
from pathlib import Path

from ..common import MiB, BenchError, drop_caches, is_mounted, percentile, run as run_cmd, unmount, wait_for, write_pattern_file
from ..report import Row, fmt_time, verdict

DESCRIPTION = "job namespace create+mount / unmount+destroy latency; staging vs rsync and cp -r (#16)"
ORDER = 75
FULL = dict(jobs_cycles=20, stage_big=1024 * MiB, stage_small=10000, stage_small_size=4096)
QUICK = dict(jobs_cycles=5, stage_big=128 * MiB, stage_small=1000, stage_small_size=4096)


def export_bytes(p):
    return 3 * (p["stage_big"] + p["stage_small"] * p["stage_small_size"])


def ctl(b, *args, timeout=600):
    c = b.cl.env
    env = dict(os.environ, SKEIN_GATEWAY=c["SKEIN_GATEWAY"], SKEIN_ADMIN_TOKEN_FILE=c["SKEIN_ADMIN_TOKEN_FILE"])
    for k in ("SKEIN_CA_FILE", "SKEIN_ADMIN_CERT", "SKEIN_ADMIN_KEY", "SKEIN_INSECURE"):
        if k in c:
            env[k] = c[k]
    return run_cmd([str(b.build_dir / "client" / "skeinctl"), "--json", *map(str, args)], env=env,
               timeout=timeout, capture=True)


def job_mount_args(b):
    c = b.cl.env
    if c.get("SKEIN_INSECURE") == "1":
        return ["--insecure"]
    return ["--ca-file", c["SKEIN_CA_FILE"], "--cert-file", c["SKEIN_NODE_CERT"], "--key-file", c["SKEIN_NODE_KEY"]]


def lifecycle(b):
    n = b.p["jobs_cycles"]
    up, down = [], []
    for i in range(n):
        job = f"bench{os.getpid()}-{i}"
        mp = b.work / f"job-mnt-{i}"
        mp.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        ctl(b, "ns", "create", job, "--uid", 1000, "--gid", 1000, "--quota-bytes", "1G")
        run_cmd([str(b.mount_bin), b.cl.gateway, str(mp), "--job", job, *job_mount_args(b), "-o", "allow_other",
             "--log-file", str(b.cl.state / f"job-mount-{i}.log"), "--log-level", "warn"], timeout=60, capture=True)
        if not wait_for(lambda: is_mounted(mp), 30):
            raise BenchError(f"job {job}'s namespace did not mount on {mp}")
        up.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        if not unmount(mp):
            raise BenchError(f"cannot unmount {mp}")
        ctl(b, "ns", "destroy", job)
        down.append(time.perf_counter() - t0)
    b.detail("jobs create+mount: " + ", ".join(fmt_time(t) for t in up))
    b.detail("jobs unmount+destroy: " + ", ".join(fmt_time(t) for t in down))
    for name, v, goal in (("create + mount a job namespace", up, 1.0),
                          ("unmount + destroy a job namespace", down, 0.5)):
        p50, p95 = percentile(v, 50), percentile(v, 95)
        b.rows.append(Row("#16", f"{name} (p95 of {n}; skein only)", None, p95, "s", None,
                          f"p95 ≤ {goal:g} s", verdict(p95 <= goal),
                          note=f"p50 {fmt_time(p50)}, p95 {fmt_time(p95)}",
                          sshfs_text="-", skein_text=fmt_time(p95)))


def staging(b, what, make):
    """One staging row: tree WHAT made by MAKE(dir) in server 0's export."""
    c = b.cl
    exp0, exp1 = Path(c.exports[0]), Path(c.exports[1])
    tag = "big" if "MiB" in what else "small"
    src = exp0 / f"bench-stage-{tag}"
    make(src)
    reps = b.p["reps"]
    res = {"skein": [], "rsync": [], "cp": []}
    ssh = (f"ssh -F /dev/null -p {c.ssh_ports[1]} -i {c.key} -o IdentitiesOnly=yes -o BatchMode=yes "
           f"-o UserKnownHostsFile={c.known_hosts} -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null")
    for i in range(reps):
        job = f"bstage{os.getpid()}-{tag}-{i}"
        for sysname in ("skein", "rsync", "cp") if i % 2 == 0 else ("cp", "rsync", "skein"):
            drop_caches()
            if sysname == "skein":
                ctl(b, "ns", "create", job, "--uid", 1000, "--gid", 1000, "--quota-bytes", "100G")
                t0 = time.perf_counter()
                out = ctl(b, "stage", "in", job, f"default:/srv0/{src.name}", "/in", "--wait", timeout=3600).stdout
                t = time.perf_counter() - t0
                last = json.loads(out.strip().splitlines()[-1])
                if last["state"] != "done":
                    raise BenchError(f"stage in ended {last['state']}: {last['error']}")
                ctl(b, "ns", "destroy", job)
            elif sysname == "rsync":
                dst = exp1 / f"rsync-{tag}"
                t0 = time.perf_counter()
                run_cmd(["rsync", "-a", "-e", ssh, f"{src}/", f"{c.user}@127.0.0.1:{dst}/"], timeout=3600, capture=True)
                t = time.perf_counter() - t0
                run_cmd(["rm", "-rf", str(dst)])
            else:
                dst = b.sA.mnt / f"cp-{tag}"
                t0 = time.perf_counter()
                run_cmd(["cp", "-r", str(b.sA.mnt / src.name), str(dst)], timeout=3600, capture=True)
                t = time.perf_counter() - t0
                run_cmd(["rm", "-rf", str(dst)], timeout=3600)  # through sshfs: its cache must see it go
            res[sysname].append(t)
        b.detail(f"jobs staging {what} rep {i + 1}: " + ", ".join(f"{s} {fmt_time(v[-1])}" for s, v in res.items()))
    run_cmd(["rm", "-rf", str(src)])
    med = {s: statistics.median(v) for s, v in res.items()}
    best = "rsync" if med["rsync"] <= med["cp"] else "cp"
    r = Row("#16", f"staging {what} into a job namespace (time, median of {reps}; against the better of "
                   f"rsync over ssh and cp -r on sshfs)", med[best], med["skein"], "s", "lower",
            "≥ 1.5× the better of the two",
            note=f"rsync {fmt_time(med['rsync'])}, cp -r on sshfs {fmt_time(med['cp'])}, skein {fmt_time(med['skein'])}",
            baseline="cp -r on sshfs" if best == "cp" else "rsync over ssh")
    r.result = verdict(r.speedup() is not None and r.speedup() >= 1.5)
    b.rows.append(r)


def run(b):
    lifecycle(b)
    small, size = b.p["stage_small"], b.p["stage_small_size"]

    def make_small(d):
        data = os.urandom(size)
        per_dir = 1000
        for k in range(small):
            sub = d / f"d{k // per_dir:03d}"
            if k % per_dir == 0:
                sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{k:05d}").write_bytes(data)

    def make_big(d):
        d.mkdir(parents=True, exist_ok=True)
        write_pattern_file(d / "big", b.p["stage_big"])

    staging(b, f"one {b.p['stage_big'] // MiB} MiB file", make_big)
    staging(b, f"{small} files of {size // 1024} KiB", make_small)
