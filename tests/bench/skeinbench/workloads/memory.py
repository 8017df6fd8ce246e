"""memory: peak RSS of skein-gateway and skein-mount while streaming a big file through the mount
(dd bs=1M, written, then read), next to sshfs's and its ssh's; also the throughput of that stream.
Runs first, so VmHWM (which cannot be reset) covers start-up plus this workload only."""

import threading

from ..common import GiB, MiB, BenchError, drop_caches, proc_status, timed
from ..report import Row, fmt_bytes, fmt_mib, fmt_time, verdict

DESCRIPTION = "peak RSS of skein-gateway and skein-mount while streaming (write, then read) a big file (#5)"
ORDER = 0
FULL = dict(mem_bytes=4 * GiB)
QUICK = dict(mem_bytes=512 * MiB)


def export_bytes(p):
    return p["mem_bytes"]


def run(b):
    n = b.p["mem_bytes"]
    c = b.cl
    gpid, mpid = c.gateway_pid(), c.mount_pid(0)
    if not gpid or not mpid:
        raise BenchError("cannot find the skein-gateway or skein-mount process")
    g0, m0 = proc_status(gpid, "VmHWM"), proc_status(mpid, "VmHWM")
    b.detail(f"memory: before streaming, VmHWM gateway {fmt_mib(g0)}, mount {fmt_mib(m0)}")
    peaks = {}

    def sample(pids, stop, out):
        while not stop.is_set():
            for k, pid in pids.items():
                v = proc_status(pid, "VmRSS")
                if v:
                    out[k] = max(out.get(k, 0), v)
            stop.wait(0.05)

    rates = {}
    for sysname in ("sshfs", "skein"):
        base = b.sA.mnt if sysname == "sshfs" else b.mA / "srv0"
        d = base / "bench-mem"
        d.mkdir(exist_ok=True)
        f = d / "stream"
        pids = {"gateway": gpid, "mount": mpid} if sysname == "skein" else {"sshfs": b.sA.proc.pid}
        for phase in ("write", "read"):
            drop_caches()
            stop, out = threading.Event(), {}
            th = threading.Thread(target=sample, args=(pids, stop, out), daemon=True)
            th.start()
            if phase == "write":
                t = timed(["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={n // MiB}", "conv=fsync",
                           "status=none"], timeout=1800)
            else:
                t = timed(["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"], timeout=1800)
            stop.set()
            th.join()
            rates[(sysname, phase)] = n / t / 1e6
            for k, v in out.items():
                peaks[(k, phase)] = v
            b.detail(f"memory: {sysname} {phase} {fmt_bytes(n)}: {fmt_time(t)}, {n / t / 1e6:.0f} MB/s, "
                     f"sampled peak RSS " + ", ".join(f"{k} {fmt_mib(v)}" for k, v in out.items()))
        f.unlink()
    gh, mh = proc_status(gpid, "VmHWM"), proc_status(mpid, "VmHWM")
    sh, kh = b.sA.rss()
    label = fmt_bytes(n)
    for phase in ("write", "read"):
        b.rows.append(Row("#5", f"stream {label} {phase} (dd bs=1M) — throughput",
                          rates[("sshfs", phase)], rates[("skein", phase)], "MB/s", "higher"))
    sshfs_txt = f"sshfs {fmt_mib(sh)} + ssh {fmt_mib(kh)}"
    b.rows.append(Row("#5", f"peak RSS skein-gateway, streaming {label} (VmHWM)", None, gh, "bytes",
                      None, "< 256 MiB", verdict(gh < 256 * MiB), sshfs_text=sshfs_txt,
                      note=f"sampled peak while writing {fmt_mib(peaks.get(('gateway', 'write')))}, "
                           f"while reading {fmt_mib(peaks.get(('gateway', 'read')))}"))
    b.rows.append(Row("#5", f"peak RSS skein-mount, streaming {label} (VmHWM)", None, mh, "bytes",
                      None, "< 128 MiB", verdict(mh < 128 * MiB), sshfs_text=sshfs_txt,
                      note=f"sampled peak while writing {fmt_mib(peaks.get(('mount', 'write')))}, "
                           f"while reading {fmt_mib(peaks.get(('mount', 'read')))}"))
    b.notes.append("Memory: VmHWM is the peak since the process started; `memory` runs first, on a "
                   "fresh cluster, so it covers start-up plus this workload only. sshfs's column gives "
                   "the VmHWM of the sshfs process and of its ssh child, for comparison.")
