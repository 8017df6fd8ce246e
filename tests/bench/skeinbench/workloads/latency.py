"""latency: the metadata scan and the file creation again, on a cluster of its own whose gateway
reaches sshd through delay relays (skein-local --latency-ms), against sshfs through a relay of the
same delay in front of the same sshd. The mount ↔ gateway hop is not delayed."""

from pathlib import Path

from ..common import SKEIN_LOCAL, run as run_cmd
from ..systems import RES, Cluster, Sshfs, measure_relay_rtt, start_relay
from .create import run_create
from .meta import run_meta

DESCRIPTION = "meta scan and file creation again with ~0.5 ms RTT relays in front of sshd (#4)"
ORDER = 100
CLUSTER = "own"
FULL = dict(lat_reps=2)
QUICK = dict(lat_reps=1)


def run(b):
    ms = b.args.latency_ms
    rtt50, rtt90 = measure_relay_rtt(ms, b.work)
    b.detail(f"latency: delay-relay.py at {ms} ms nominal: measured TCP round trip p50 {rtt50 * 1000:.2f} ms, "
             f"p90 {rtt90 * 1000:.2f} ms (a local echo through one relay)")
    lc = Cluster(b, b.work / "cluster-lat", servers=1, mounts=1, latency_ms=ms).up()
    # sshfs goes through a relay of its own, with the same delay, in front of the same sshd.
    rport, _ = start_relay(lc.ssh_ports[0], ms, b.work, str(b.work / "sshfs-relay"))
    kh = b.work / "sshfs-relay-known_hosts"
    lines = []
    for line in Path(lc.known_hosts).read_text().splitlines():
        if line.startswith(f"[127.0.0.1]:{lc.ssh_ports[0]} "):
            lines.append(f"[127.0.0.1]:{rport} " + line.split(" ", 1)[1])
    kh.write_text("\n".join(lines) + "\n")
    s = Sshfs(b, b.work / "sshfs-lat", rport, lc.exports[0], lc, known_hosts=str(kh)).mount()
    tag = f", +{ms:g} ms RTT relay"
    b.notes.append(f"Latency rows: relays add {ms:g} ms nominal round trip (measured p50 "
                   f"{rtt50 * 1000:.2f} ms through one delay-relay.py): skein-local --latency-ms {ms:g} "
                   f"between gateway and sshd; one more relay between sshfs and the same sshd. "
                   f"The mount ↔ gateway hop is not delayed.")
    try:
        run_meta(b, lc, s, lc.mounts[0], lc.exports[0], b.p["lat_reps"], "#4", tag, 0, local=False)
        run_create(b, {"sshfs": s.mnt, "skein": Path(lc.mounts[0]) / "srv0"}, b.p["lat_reps"], "#4", tag)
    finally:
        s.unmount()
        run_cmd([str(SKEIN_LOCAL), "down", "--state", str(lc.state)], timeout=180, capture=True, check=False)
        if lc.state in RES.clusters:
            RES.clusters.remove(lc.state)
