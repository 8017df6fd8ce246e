"""What the workloads run on: the skein-local cluster, sshfs mounts and delay relays, and the
record of everything the bench started (RES), torn down by Resources.cleanup()."""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import (DELAY_RELAY, SKEIN_LOCAL, BenchError, is_mounted, log, mounted_points,
                     percentile, proc_status, find_pids, run, session_members, comm_of, unmount,
                     wait_for)

# ------------------------------------------------------------------ what the bench started

class Resources:
    """Everything the bench started, torn down in reverse order by cleanup()."""

    def __init__(self):
        self.procs = []        # Popen objects (sshfs -f, skein-mount -f, relays, ...)
        self.mounts = []       # FUSE mount points the bench made itself
        self.clusters = []     # skein-local state dirs that were `up`
        self.tmpfs = []        # tmpfs mount points
        self.dirs = []         # directories to remove
        self.done = False
        self.save_logs = False  # copy the logs out of the work directory (set when something failed)

    def copy_logs(self):
        """Logs and configs of the work directory to /tmp/skein-bench-logs.*, for a look after a failure."""
        if not self.dirs:
            return
        dest = Path(tempfile.mkdtemp(prefix="skein-bench-logs.", dir="/tmp"))
        src = self.dirs[0]
        n = 0
        for p in src.rglob("*"):
            try:
                if "exports" in p.relative_to(src).parts or "mnt" in p.relative_to(src).parts:
                    continue
                if p.is_file() and (p.suffix in (".log", ".out", ".toml", ".prev") or p.name in ("env", "port")):
                    t = dest / p.relative_to(src)
                    t.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(p, t)
                    n += 1
            except OSError:
                continue
        log(f"kept {n} log files in {dest}")

    def cleanup(self, keep=False):
        if self.done:
            return
        self.done = True
        for mp in reversed(self.mounts):
            if is_mounted(mp) and not unmount(mp):
                log(f"warning: could not unmount {mp}")
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log(f"warning: process {p.pid} did not exit")
        for mp in reversed(self.mounts):
            if is_mounted(mp) and not unmount(mp):
                log(f"warning: could not unmount {mp}")
        for state in reversed(self.clusters):
            log(f"stopping cluster {state}")
            subprocess.run([str(SKEIN_LOCAL), "down", "--state", str(state)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180, check=False)
        if self.save_logs or keep:
            self.copy_logs()
        if keep:
            log("--keep: leaving " + " ".join(map(str, self.dirs)) +
                (f" (a tmpfs: umount {' '.join(map(str, self.tmpfs))} when done)" if self.tmpfs else ""))
            return
        for mp in reversed(self.tmpfs):
            if subprocess.run(["umount", str(mp)], check=False, stderr=subprocess.DEVNULL).returncode != 0:
                subprocess.run(["umount", "-l", str(mp)], check=False, stderr=subprocess.DEVNULL)
        for d in reversed(self.dirs):
            if any(str(m).startswith(str(d) + "/") or str(m) == str(d) for m in mounted_points()):
                log(f"warning: something is still mounted under {d}; not removing it")
                continue
            shutil.rmtree(d, ignore_errors=True)


RES = Resources()


def spawn(cmd, log_path, **kw):
    """Start a long-lived child in its own session (Ctrl-C goes to the bench only)."""
    with open(log_path, "ab") as lf:
        p = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.DEVNULL, stdout=lf, stderr=lf,
                             start_new_session=True, **kw)
    RES.procs.append(p)
    return p


def stop_proc(p, timeout=10):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except OSError:
            p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=5)



# ------------------------------------------------------------------ ports and relays

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def start_relay(target_port, delay_ms, logdir, tag):
    port = free_port()
    p = spawn([sys.executable, DELAY_RELAY, port, target_port, delay_ms, "--tag", tag],
              Path(logdir) / f"relay-{port}.log")
    if not wait_for(lambda: port_open(port) or p.poll() is not None, 15) or p.poll() is not None:
        raise BenchError(f"delay relay on port {port} did not start")
    return port, p


def measure_relay_rtt(delay_ms, logdir, pings=200):
    """p50 TCP round trip through a delay-relay.py with DELAY_MS, to a local echo server."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    sport = srv.getsockname()[1]

    def serve(c):
        try:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                d = c.recv(64)
                if not d:
                    break
                c.sendall(d)
        except OSError:
            pass
        c.close()

    def accept_loop():
        # every connection (start_relay's readiness probe connects, too)
        try:
            while True:
                c, _ = srv.accept()
                threading.Thread(target=serve, args=(c,), daemon=True).start()
        except OSError:
            pass

    threading.Thread(target=accept_loop, daemon=True).start()
    rport, rp = start_relay(sport, delay_ms, logdir, "rtt-probe")
    try:
        c = socket.create_connection(("127.0.0.1", rport), timeout=5)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rtts = []
        for _ in range(pings):
            t0 = time.perf_counter()
            c.sendall(b"x")
            if not c.recv(64):
                break
            rtts.append(time.perf_counter() - t0)
        c.close()
    finally:
        stop_proc(rp)
        srv.close()
    return percentile(rtts, 50), percentile(rtts, 90)


# ------------------------------------------------------------------ skein cluster

class Cluster:
    def __init__(self, bench, state, servers, mounts, latency_ms=None):
        self.b = bench
        self.state = Path(state)
        self.servers = servers
        self.nmounts = mounts
        self.latency_ms = latency_ms
        self.remounts = {}   # mount index -> Popen of our own skein-mount -f

    def up(self):
        cmd = [SKEIN_LOCAL, "up", "--servers", self.servers, "--mounts", self.nmounts,
               "--state", self.state, "--no-build", "--log-level", "warn"]
        if self.latency_ms:
            cmd += ["--latency-ms", self.latency_ms]
        if self.b.args.insecure:
            cmd += ["--insecure"]
        env = dict(os.environ, SKEIN_BUILD_DIR=str(self.b.build_dir),
                   SKEIN_MOUNT_ARGS=self.b.args.mount_args)
        log("starting cluster: " + shlex.join(map(str, cmd)))
        RES.clusters.append(self.state)
        run([str(c) for c in cmd], env=env, timeout=300, capture=True)
        self.env = {}
        for line in (self.state / "env").read_text().splitlines():
            m = re.match(r"export (\w+)=(.*)$", line)
            if m:
                self.env[m.group(1)] = " ".join(shlex.split(m.group(2)))
        self.mounts = self.env["SKEIN_MOUNTS"].split()
        self.exports = self.env["SKEIN_EXPORTS"].split()
        self.ssh_ports = [int(p) for p in self.env["SKEIN_SSH_PORTS"].split()]
        self.gateway = self.env["SKEIN_GATEWAY"]
        self.key = self.env["SKEIN_SSH_KEY"]
        self.known_hosts = self.env["SKEIN_KNOWN_HOSTS"]
        self.user = self.env["SKEIN_SSH_USER"]
        return self

    def credentials(self):
        """skein-mount's arguments for the cluster's token and TLS files."""
        args = ["--token-file", self.env["SKEIN_TOKEN_FILE"]]
        if self.env.get("SKEIN_INSECURE") == "1":
            return args + ["--insecure"]
        return args + ["--ca-file", self.env["SKEIN_CA_FILE"], "--cert-file", self.env["SKEIN_NODE_CERT"],
                       "--key-file", self.env["SKEIN_NODE_KEY"]]

    def gateway_pid(self):
        pids = find_pids("skein-gateway", self.env["SKEIN_CONFIG"])
        return pids[0] if pids else None

    def mount_pid(self, j):
        pids = find_pids("skein-mount", self.mounts[j])
        return pids[0] if pids else None

    def remount(self, j):
        """Unmount skein mount J and mount it again with a fresh skein-mount process."""
        mp = self.mounts[j]
        old = self.mount_pid(j)
        if not unmount(mp):
            raise BenchError(f"cannot unmount {mp}")
        if old:
            wait_for(lambda: proc_status(old, "VmRSS") is None, 10)
        if j in self.remounts:
            stop_proc(self.remounts.pop(j))
        opts = ["-o", "allow_other"] if os.geteuid() == 0 else []
        # --log-file below the state dir: `skein-local down` finds the process by it, too.
        p = spawn([self.b.mount_bin, self.gateway, mp, "--namespace", self.env.get("SKEIN_NAMESPACE", "default"),
                   *self.credentials(), "-f", *opts, *self.b.args.mount_args.split(), "--log-file", self.state / f"mount-{j}.bench.log", "--log-level", "warn"],
                  self.state / f"mount-{j}.bench.out")
        self.remounts[j] = p
        if not wait_for(lambda: is_mounted(mp) or p.poll() is not None, 30) or not is_mounted(mp):
            raise BenchError(f"skein-mount did not come back on {mp}; see {self.state}/mount-{j}.bench.out")

    def drop_mount_caches(self, j):
        """Fresh mount-level cache state: `skein-mount --drop-caches MNT` if it exists, else remount."""
        if self.b.has_drop_caches:
            run([str(self.b.mount_bin), "--drop-caches", self.mounts[j]], timeout=60, capture=True)
            return "skein-mount --drop-caches"
        self.remount(j)
        return "remount"


# ------------------------------------------------------------------ sshfs

class Sshfs:
    def __init__(self, bench, mnt, port, export, cluster, known_hosts=None):
        self.b = bench
        self.mnt = Path(mnt)
        self.port = port
        self.export = export
        self.c = cluster
        self.known_hosts = known_hosts or cluster.known_hosts
        self.proc = None
        self._own_ssh = set()

    def cmd(self):
        opts = (f"IdentityFile={self.c.key},UserKnownHostsFile={self.known_hosts},"
                f"StrictHostKeyChecking=yes,GlobalKnownHostsFile=/dev/null,IdentitiesOnly=yes,BatchMode=yes")
        extra = ["-o", self.b.args.sshfs_opts] if self.b.args.sshfs_opts else []
        return ["sshfs", "-f", "-F", "/dev/null", "-p", str(self.port), "-o", opts, *extra,
                f"{self.c.user}@127.0.0.1:{self.export}", str(self.mnt)]

    def mount(self):
        self.mnt.mkdir(parents=True, exist_ok=True)
        if str(self.mnt) not in RES.mounts:
            RES.mounts.append(str(self.mnt))
        others = self._ssh_like_ours()
        self.proc = spawn(self.cmd(), self.mnt.parent / f"{self.mnt.name}.log")
        if not wait_for(lambda: is_mounted(self.mnt) or self.proc.poll() is not None, 30) \
                or not is_mounted(self.mnt):
            raise BenchError(f"sshfs did not mount {self.mnt}: {shlex.join(self.cmd())} "
                             f"(log {self.mnt.parent / (self.mnt.name + '.log')})")
        self._own_ssh = self._ssh_like_ours() - others
        return self

    def remount(self):
        self.unmount()
        self.mount()

    def unmount(self):
        unmount(self.mnt)
        if self.proc:
            stop_proc(self.proc)
            self.proc = None

    def rss(self):
        """VmHWM of sshfs and of its ssh child, bytes."""
        if not self.proc:
            return None, None
        s = proc_status(self.proc.pid, "VmHWM")
        kids = self.ssh_pids()
        k = sum(proc_status(p, "VmHWM") or 0 for p in kids) if kids else None
        return s, k

    def _ssh_like_ours(self):
        """Every ssh process with this mount's port and key on its command line (another sshfs on
        the same server, sshfs_b(), has them too)."""
        out = set()
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if comm_of(d) != "ssh":
                    continue
                argv = Path(f"/proc/{d}/cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if any(a.endswith(str(self.port)) for a in argv) and any(self.c.key in a for a in argv):
                out.add(int(d))
        return out

    def ssh_pids(self):
        """The ssh process(es) this sshfs runs: in its session, or (sshfs double-forks ssh) those
        with this mount's port and key that appeared when it mounted (mount())."""
        out = set(p for p in session_members(self.proc.pid) if comm_of(p) == "ssh")
        out |= set(p for p in self._own_ssh if Path(f"/proc/{p}").exists())
        return sorted(out)
