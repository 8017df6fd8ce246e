"""The workloads, one module each. Adding a workload is adding a module here that declares:

    DESCRIPTION  one line for --list, --help and the log
    ORDER        where it runs among the others (lower first; ties by name). 0 is `memory`, which
                 must run first on fresh processes; 100 is `latency`, which runs last.
    CLUSTER      "main" (default): runs on the shared cluster (b.cl, mounts b.mA/b.mB, sshfs
                 b.sA) set up once for all of them; "own": runs after it is stopped and brings
                 its own (see latency.py)
    FULL, QUICK  its parameters, merged into b.p for a full and a --quick run (names must be
                 unique across workloads; `reps`, the repetitions of each timed run, is the
                 harness's and shared by all)
    export_bytes(p)  optional: the most bytes it keeps on the exports at once, so the tmpfs
                 they live on is made large enough
    run(b)       the workload: measures through the Bench `b` (see harness.Bench: paths(),
                 rep_order(), reps_left(), detail(), rows, notes) and appends report.Row objects
                 to b.rows. A BenchError or OSError marks it FAILED and the run goes on.

The module's name is the workload's name (--only, --skip).
"""

import importlib
import pkgutil


class Workload:
    def __init__(self, name, module):
        self.name = name
        self.module = module
        self.description = getattr(module, "DESCRIPTION", name)
        self.order = getattr(module, "ORDER", 50)
        self.cluster = getattr(module, "CLUSTER", "main")
        self.full = dict(getattr(module, "FULL", {}))
        self.quick = dict(getattr(module, "QUICK", {}))
        if self.cluster not in ("main", "own"):
            raise ValueError(f"workload {name}: CLUSTER must be 'main' or 'own', not {self.cluster!r}")
        if not callable(getattr(module, "run", None)):
            raise ValueError(f"workload {name}: no run(b) function")

    def export_bytes(self, p):
        f = getattr(self.module, "export_bytes", None)
        return f(p) if f else 0

    def run(self, bench):
        self.module.run(bench)


def discover():
    """Every workload module of this package, in run order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        found.append(Workload(info.name, importlib.import_module(f"{__name__}.{info.name}")))
    found.sort(key=lambda w: (w.order, w.name))
    return {w.name: w for w in found}


def parameters(workloads, common, quick):
    """COMMON and the merged FULL (or QUICK) parameters of all workloads; a name declared twice is
    an error."""
    p = dict(common)
    owner = {k: "the harness" for k in common}
    for w in workloads.values():
        for k, v in (w.quick if quick else w.full).items():
            if k in owner:
                raise ValueError(f"parameter {k} declared by both {owner[k]} and {w.name}")
            owner[k] = w.name
            p[k] = v
    return p
