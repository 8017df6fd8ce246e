#!/usr/bin/env python3
"""How long skein's Slurm integration takes around a job, on a real single-node Slurm: from
allocation (slurmctld's "sched: Allocate JobId=N", to the millisecond) to the job's first line
with its scratch mounted, and from the job's end (its last line) to everything removed (no mount,
no mount process, no namespace at the gateway). p50 and p95 over N jobs (default 10), run one
after another. Goals: p95 <= 3 s and <= 2 s.

Usage: SKEIN_TEST_TMP=DIR tests/slurm/bench.py [--jobs N] [--json FILE]
Prints a table; exits 1 when a goal is missed.
"""

import argparse
import datetime
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_harness as h  # noqa: E402

GOAL_START_S = 3.0
GOAL_END_S = 2.0


def percentile(values, p):
    """Nearest rank."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def allocation_time(log_text, job_id):
    m = re.search(r"^\[([0-9T:.-]+)\] sched: Allocate JobId=" + job_id + r"\b", log_text, re.M)
    if not m:
        return None
    return datetime.datetime.fromisoformat(m.group(1)).timestamp()  # slurmctld logs local time


def read_float(path, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
            if text:
                return float(text)
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{path} was not written within {seconds} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--json", help="write the samples and percentiles here")
    args = ap.parse_args()
    h.install_signal_handlers()
    if h.missing_slurm():
        print(f"not installed: {', '.join(h.missing_slurm())}", file=sys.stderr)
        return 2
    c = h.Cluster("slurm-bench")
    starts, ends = [], []
    try:
        c.start()
        user = h.USERS[0]
        work = c.workdir(user)
        for i in range(args.jobs):
            job, r = c.sbatch(user, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=10G
[ -O "$SKEIN_SCRATCH" ] && date +%s.%N > {work}/first-$SLURM_JOB_ID
echo data > "$SKEIN_SCRATCH/f"
date +%s.%N > {work}/last-$SLURM_JOB_ID
""")
            if not job:
                raise RuntimeError(f"sbatch refused: {r.stderr}")
            first = read_float(os.path.join(work, f"first-{job}"))
            last = read_float(os.path.join(work, f"last-{job}"))
            while c.leftovers(job):
                if time.time() - last > 60:
                    raise RuntimeError(f"job {job} left {c.leftovers(job)} for 60 s")
                time.sleep(0.02)
            removed = time.time()
            c.wait_job(job)
            alloc = allocation_time(c.slurmctld_log(), job)
            if alloc is None:
                raise RuntimeError(f"no allocation of job {job} in slurmctld's log")
            starts.append(first - alloc)
            ends.append(removed - last)
            print(f"job {job}: allocation -> first line {first - alloc:.3f} s, "
                  f"end -> removed {removed - last:.3f} s", flush=True)
    finally:
        c.close()
    result = {
        "jobs": len(starts),
        "start_s": {"p50": percentile(starts, 50), "p95": percentile(starts, 95), "samples": starts},
        "end_s": {"p50": percentile(ends, 50), "p95": percentile(ends, 95), "samples": ends},
    }
    print()
    print(f"{'':32} {'p50':>7} {'p95':>7} {'goal p95':>9}")
    print(f"{'allocation -> first line':32} {result['start_s']['p50']:7.3f} {result['start_s']['p95']:7.3f} "
          f"{GOAL_START_S:9.1f}")
    print(f"{'job end -> everything removed':32} {result['end_s']['p50']:7.3f} {result['end_s']['p95']:7.3f} "
          f"{GOAL_END_S:9.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    ok = result["start_s"]["p95"] <= GOAL_START_S and result["end_s"]["p95"] <= GOAL_END_S
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
