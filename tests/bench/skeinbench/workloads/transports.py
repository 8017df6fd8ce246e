"""transports: skein's two SSH transports side by side with sshfs, against the same sshd (server 0)
and the same export: the cluster's backend srv0 (libssh, the default) and a backend srv0-openssh
added at run time with `skeinctl backends add --ssh-transport openssh` on the same export, mounted
at /srv0-openssh of the same skein mount. Sequential write and read, four readers, creates, a cold
`du`, and the CPU-seconds per GiB read of the gateway (and, with openssh, of its ssh children) and
of sshfs with its ssh."""

import os
import statistics
import subprocess
import time
from pathlib import Path

from ..common import GiB, MiB, BenchError, drop_caches, log, make_tree, timed, wait_all, write_pattern_file
from ..common import run as run_cmd
from ..report import Row, fmt_bytes, verdict

DESCRIPTION = "libssh and openssh transports vs sshfs on one sshd: dd, 4 readers, creates, du, CPU/GiB (#20)"
ORDER = 70
FULL = dict(tr_seq_bytes=1 * GiB, tr_par_bytes=256 * MiB, tr_creates=2000, tr_du_dirs=20)
QUICK = dict(tr_seq_bytes=256 * MiB, tr_par_bytes=64 * MiB, tr_creates=500, tr_du_dirs=10)

SYSTEMS = ("sshfs", "libssh", "openssh")
TICK = os.sysconf("SC_CLK_TCK")


def export_bytes(p):
    return 2 * p["tr_seq_bytes"] + 4 * p["tr_par_bytes"]


def cpu_seconds(pid):
    """utime + stime of a process (all its threads), seconds; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid, comm):
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1:stat.rfind(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and name == comm:
            out.append(int(d))
    return out


def ctl(b, *args, check=True):
    c = b.cl
    env = dict(os.environ, SKEIN_ADMIN_TOKEN_FILE=c.env["SKEIN_ADMIN_TOKEN_FILE"])
    for k in ("SKEIN_CA_FILE", "SKEIN_ADMIN_CERT", "SKEIN_ADMIN_KEY", "SKEIN_INSECURE"):
        if k in c.env:
            env[k] = c.env[k]
    return run_cmd([str(b.build_dir / "client" / "skeinctl"), "--gateway", c.gateway, *args], env=env,
               capture=True, timeout=120, check=check)


def add_openssh_backend(b):
    c = b.cl
    ctl(b, "backends", "add", "srv0-openssh", "--host", "127.0.0.1", "--port", str(c.ssh_ports[0]),
        "--user", c.user, "--identity", c.key, "--known-hosts", c.known_hosts,
        "--ssh-config", c.env["SKEIN_SSH_CONFIG"], "--root", c.exports[0], "--ssh-transport", "openssh",
        "--namespace", "default", "--path", "/srv0-openssh")
    mnt = b.mA / "srv0-openssh"
    deadline = time.monotonic() + 30
    while not mnt.is_dir():
        if time.monotonic() > deadline:
            raise BenchError(f"{mnt} did not appear after skeinctl backends add")
        time.sleep(0.2)


class Cpu:
    """CPU-seconds of what serves each system on the client's side of sshd: sshfs and its ssh;
    skein-mount, the gateway and the gateway's ssh children (the openssh transport's)."""

    def __init__(self, b):
        self.b = b

    def pids(self, sysname):
        """(the system's own processes, its ssh processes)."""
        if sysname == "sshfs":
            return [self.b.sA.proc.pid], self.b.sA.ssh_pids()
        gw = self.b.cl.gateway_pid()
        own = [gw, self.b.cl.mount_pid(0)]
        if None in own:
            raise BenchError(f"no skein-gateway or skein-mount process to count CPU time of: {own}")
        return own, (children(gw, "ssh") if sysname == "openssh" else [])

    def sample(self, sysname):
        own, ssh = self.pids(sysname)
        return {p: cpu_seconds(p) for p in own}, {p: cpu_seconds(p) for p in ssh}

    @staticmethod
    def used(before, after):
        """(all CPU-seconds used between the samples, of which the ssh processes')."""
        def spent(b, a):
            return sum(a[p] - b.get(p, 0.0) for p in a)
        ssh = spent(before[1], after[1])
        return spent(before[0], after[0]) + ssh, ssh


def cold(b, sysname):
    if sysname == "sshfs":
        b.sA.remount()
    else:
        b.cl.drop_mount_caches(0)
    drop_caches()


def run(b):
    add_openssh_backend(b)
    n, k, pn = b.p["tr_seq_bytes"], 4, b.p["tr_par_bytes"]
    reps = b.p["reps"]
    base = {"sshfs": b.sA.mnt, "libssh": b.mA / "srv0", "openssh": b.mA / "srv0-openssh"}
    ep = b.exp0 / "bench-tr"
    ep.mkdir(exist_ok=True)
    write_pattern_file(ep / "read-src", n)
    for j in range(k):
        write_pattern_file(ep / f"par{j}", pn)
    make_tree(ep / "tree", b.p["tr_du_dirs"], 100)
    cpu = Cpu(b)
    keys = ("write", "read", "par", "create", "du", "cpu", "cpu_ssh")
    res = {(s, m): [] for s in SYSTEMS for m in keys}
    t_start = time.monotonic()
    for i in range(reps):
        if i and not b.reps_left("transports", t_start, i, reps):
            reps = i
            break
        order = SYSTEMS[i % 3:] + SYSTEMS[:i % 3]
        for s in order:
            d = base[s] / "bench-tr"
            drop_caches()
            t = timed(["dd", "if=/dev/zero", f"of={d / f'write-{s}'}", "bs=1M", f"count={n // MiB}",
                       "conv=fsync", "status=none"])
            res[(s, "write")].append(n / t / 1e6)
            (d / f"write-{s}").unlink()

            drop_caches()
            before = cpu.sample(s)
            t = timed(["dd", f"if={d / 'read-src'}", "of=/dev/null", "bs=1M", "status=none"])
            total, ssh = Cpu.used(before, cpu.sample(s))
            res[(s, "read")].append(n / t / 1e6)
            res[(s, "cpu")].append(total / (n / GiB))
            res[(s, "cpu_ssh")].append(ssh / (n / GiB))

            drop_caches()
            t0 = time.perf_counter()
            wait_all([subprocess.Popen(["dd", f"if={d / f'par{j}'}", "of=/dev/null", "bs=1M", "status=none"],
                                      stdin=subprocess.DEVNULL, stderr=subprocess.PIPE) for j in range(k)],
                    f"four readers on {s}")
            res[(s, "par")].append(k * pn / (time.perf_counter() - t0) / 1e6)

            cd = d / f"creates-{s}-{i}"
            cd.mkdir()
            t0 = time.perf_counter()
            for j in range(b.p["tr_creates"]):
                os.close(os.open(cd / f"f{j:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
            res[(s, "create")].append(time.perf_counter() - t0)

            cold(b, s)
            t0 = time.perf_counter()
            run_cmd(["du", "-s", str(d / "tree")], capture=True, timeout=900)
            res[(s, "du")].append(time.perf_counter() - t0)
        b.detail(f"transports rep {i + 1}: " + "; ".join(
            f"{s}: write {res[(s, 'write')][-1]:.0f}, read {res[(s, 'read')][-1]:.0f}, "
            f"4 readers {res[(s, 'par')][-1]:.0f} MB/s, {b.p['tr_creates']} creates "
            f"{res[(s, 'create')][-1]:.2f} s, cold du {res[(s, 'du')][-1]:.2f} s, "
            f"{res[(s, 'cpu')][-1]:.2f} CPU-s/GiB read" for s in SYSTEMS))
    med = {key: statistics.median(v) for key, v in res.items() if v}
    label, plabel = fmt_bytes(n), fmt_bytes(pn)
    metrics = [
        ("read", f"sequential read {label} (MB/s)", "MB/s", "higher", 1.5),
        ("write", f"sequential write {label} conv=fsync (MB/s)", "MB/s", "higher", 1.2),
        ("par", f"4 readers of 4 different {plabel} files, aggregate (MB/s)", "MB/s", "higher", None),
        ("create", f"{b.p['tr_creates']} creates (s)", "s", "lower", None),
        ("du", f"cold du -s of {b.p['tr_du_dirs'] * 100} files (s)", "s", "lower", None),
        ("cpu", "CPU-seconds per GiB read (sshfs + its ssh; skein-mount + gateway + its ssh children)",
         "s", "lower", None),
    ]
    for key, what, unit, better, goal in metrics:
        for t in ("libssh", "openssh"):
            r = Row("#20", f"{t}: {what}, median of {reps}", med[("sshfs", key)], med[(t, key)], unit,
                    better, f"≥ {goal}× sshfs" if goal and t == "libssh" else "")
            if goal and t == "libssh":
                r.result = verdict(r.speedup() >= goal)
            b.rows.append(r)
    b.notes.append(
        "transports: openssh's CPU per GiB read includes its ssh children "
        f"({med[('openssh', 'cpu_ssh')]:.2f} s/GiB of its {med[('openssh', 'cpu')]:.2f}); "
        f"sshfs's ssh took {med[('sshfs', 'cpu_ssh')]:.2f} of its {med[('sshfs', 'cpu')]:.2f}")
    ratios = ", ".join(f"{key} {med[('openssh', key)] / med[('libssh', key)]:.2f}"
                       for key, *_ in metrics if med[("libssh", key)])
    b.notes.append(f"transports: openssh / libssh: {ratios}")
    log(f"transports: openssh / libssh: {ratios}")
    ctl(b, "backends", "remove", "srv0-openssh", check=False)
    run_cmd(["rm", "-rf", str(ep)], timeout=300)
