"""Results: one Row per figure, the markdown table with the run's header, its JSON copy, and the
plots (PNG, with Debian's python3-matplotlib)."""

import datetime
import json
import os
import platform
import shlex
import sys
import textwrap
from pathlib import Path

from .common import GiB, MiB, git, loadavg, log, run


def fmt_bytes(n):
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB} GiB"
    return f"{n // MiB} MiB"


def fmt_time(s):
    if s is None:
        return "—"
    if s < 0.01:
        return f"{s * 1000:.2f} ms"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    return f"{s:.2f} s"


def fmt_rate(mbps):
    return "—" if mbps is None else f"{mbps:.0f} MB/s"


def fmt_mib(b):
    return "—" if b is None else f"{b / MiB:.0f} MiB"


class Row:
    def __init__(self, issue, workload, sshfs=None, skein=None, unit="", better=None, goal="",
                 result="", note="", sshfs_text=None, skein_text=None, baseline="sshfs"):
        self.issue = issue
        self.workload = workload
        self.sshfs = sshfs
        self.skein = skein
        self.unit = unit          # "MB/s", "s", "bytes", ...
        self.better = better      # "higher", "lower" or None (no comparison)
        self.goal = goal
        self.result = result
        self.note = note
        self.sshfs_text = sshfs_text
        self.skein_text = skein_text
        # What the "sshfs" figure is of: sshfs, or another baseline the row names (one node's
        # plain read through skein, cp -r on the skein mount, ...). Such a row is shown with its
        # baseline in the sshfs column and left out of the skein-vs-sshfs plots.
        self.baseline = baseline

    def ratio(self):
        if self.sshfs and self.skein and self.better:
            return self.skein / self.sshfs
        return None

    def speedup(self):
        r = self.ratio()
        if r is None:
            return None
        return r if self.better == "higher" else 1.0 / r

    def text(self, v):
        if v is None:
            return "—"
        if self.unit == "MB/s":
            return fmt_rate(v)
        if self.unit == "s":
            return fmt_time(v)
        if self.unit == "bytes":
            return fmt_mib(v)
        if self.unit in ("IOPS", "ops/s"):
            return f"{v:,.0f} {self.unit}"
        return f"{v:g} {self.unit}".strip()

    def cells(self):
        r, s = self.ratio(), self.speedup()
        base = self.sshfs_text if self.sshfs_text is not None else self.text(self.sshfs)
        if self.baseline != "sshfs":
            base = f"{base} ({self.baseline})"
        return [self.issue, self.workload, base,
                self.skein_text if self.skein_text is not None else self.text(self.skein),
                "—" if r is None else f"{r:.2f}",
                "—" if s is None else f"{s:.2f}×",
                self.goal or "—", self.result or "—"]

    def as_dict(self):
        return dict(issue=self.issue, workload=self.workload, sshfs=self.sshfs, skein=self.skein,
                    unit=self.unit, better=self.better, ratio=self.ratio(), speedup=self.speedup(),
                    goal=self.goal, result=self.result, note=self.note, baseline=self.baseline,
                    sshfs_text=self.cells()[2], skein_text=self.cells()[3])


def verdict(ok):
    return "PASS" if ok else "MISS"


def header(b):
    """The run's circumstances: commit, command, build, machine, load, versions, set-up."""
    commit = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    sshfs_v = run(["sshfs", "--version"], capture=True, check=False)
    sshfs_v = next((l.strip() for l in (sshfs_v.stdout + sshfs_v.stderr).splitlines()
                    if l.startswith("SSHFS version")), "sshfs (version unknown)")
    ssh_v = run(["ssh", "-V"], capture=True, check=False).stderr.strip()
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cpus = os.cpu_count() or 1
    load = f"{getattr(b, 'load_start', float('nan')):.1f} at start, {loadavg():.1f} at end ({cpus} CPUs)"
    if max(getattr(b, "load_start", 0), loadavg()) > cpus:
        load += " — the machine was busy with other work: figures are noisy"
    return dict(
        load=load,
        date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        commit=commit + (" (working tree has uncommitted changes)" if dirty else ""),
        command="tests/bench/run " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        mode="quick" if b.args.quick else "full",
        build=f"{b.build_dir} ({getattr(b, 'build_type', 'unknown')})",
        machine=f"{platform.node()}, {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}",
        sshfs=sshfs_v, ssh=ssh_v,
        sshfs_cmd="sshfs -f -F /dev/null -p PORT -o IdentityFile=KEY,UserKnownHostsFile=KNOWN_HOSTS,"
                  "StrictHostKeyChecking=yes,GlobalKnownHostsFile=/dev/null,IdentitiesOnly=yes,BatchMode=yes"
                  + (f" -o {b.args.sshfs_opts}" if b.args.sshfs_opts else "")
                  + " USER@127.0.0.1:EXPORT0 MNT",
        storage=getattr(b, "storage", "?"),
        drop_caches="skein-mount --drop-caches" if getattr(b, "has_drop_caches", False)
        else "remount (skein-mount has no --drop-caches)",
        striped="yes" if getattr(b, "has_striped", False) else "no",
    )


def markdown(b, meta, plots=()):
    m = meta
    out = [f"# skein vs sshfs — benchmark results ({m['mode']} run)", "",
           f"- date: {m['date']}",
           f"- commit: {m['commit']}",
           f"- command: `{m['command']}`",
           f"- build: {m['build']}",
           f"- machine: {m['machine']}",
           f"- load average (1 min): {m['load']}",
           f"- {m['sshfs']}; {m['ssh']}",
           f"- sshfs: `{m['sshfs_cmd']}` (defaults otherwise)",
           f"- storage servers' exports on: {m['storage']}; page cache dropped before every measured run",
           f"- skein cold cache: {m['drop_caches']}; striped layout present: {m['striped']}",
           "",
           "skein/sshfs is the ratio of the raw figures. speed-up is how many times better skein is "
           "(> 1: skein better): skein/sshfs for MB/s, sshfs/skein for times. A row whose "
           "baseline is not sshfs names it in brackets in the sshfs column (and is left out of the "
           "skein-vs-sshfs plots).",
           "",
           "| issue | workload | sshfs | skein | skein/sshfs | speed-up | goal | result |",
           "|---|---|---|---|---|---|---|---|"]
    for r in b.rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in r.cells()) + " |")
    notes = [f"{r.workload}: {r.note}" for r in b.rows if r.note]
    if notes or b.notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in b.notes + notes]
    out += ["", "Raw figures (each run):", "", "```"] + b.details + ["```", "",
            "Time per workload: " + ", ".join(f"{k} {v:.0f} s" for k, v in b.timings.items()), ""]
    if plots:
        out += ["Plots: " + ", ".join(f"`{Path(p).name}`" for p in plots), ""]
    return "\n".join(out)


def results_json(b, meta):
    return dict(meta=meta, rows=[r.as_dict() for r in b.rows], notes=b.notes, details=b.details,
                timings=b.timings)


# ------------------------------------------------------------------ plots

def _label(workload, width=46):
    """A row's workload, without its "(unit, median of N)" tail, wrapped for an axis."""
    text = workload
    if text.endswith(")") and " (" in text:
        text = text[:text.rindex(" (")]
    return "\n".join(textwrap.wrap(text, width)) or workload


def plot(rows, stem, title):
    """Draws the rows (as_dict() form) into PNGs named STEM-<what>.png; returns their paths.

    speedup:    how many times better skein is than sshfs, per comparable figure (> 1: skein better)
    throughput: MB/s of sshfs and skein side by side
    times:      seconds of sshfs and skein side by side (log scale: they span four decades)
    Nothing is drawn (and a note logged) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log(f"no plots: {sys.executable} has no matplotlib (deploy/install-deps installs Debian's "
            "python3-matplotlib for /usr/bin/python3, which tests/bench/run runs on)")
        return []
    stem = Path(stem)
    written = []

    def save(fig, what):
        path = stem.with_name(f"{stem.name}-{what}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    # Only rows against sshfs (an older run's JSON has no baseline: all of its rows were taken
    # as against sshfs).
    rows = [r for r in rows if r.get("baseline", "sshfs") == "sshfs"]
    comparable = [r for r in rows if r.get("speedup")]
    if comparable:
        fig, ax = plt.subplots(figsize=(9, 0.55 * len(comparable) + 1.4))
        labels = [_label(r["workload"]) for r in comparable][::-1]
        values = [r["speedup"] for r in comparable][::-1]
        colors = ["#2a7ab9" if v >= 1 else "#d9822b" for v in values]
        bars = ax.barh(range(len(values)), values, color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_yticks(range(len(values)), labels, fontsize=7)
        ax.set_xlabel("speed-up of skein over sshfs (× better; > 1: skein better; log scale)")
        ax.set_title(title + ": skein vs sshfs", fontsize=9)
        for bar, v in zip(bars, values):
            ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:.2f}×", va="center",
                    fontsize=7)
        ax.set_xscale("log")  # from about 0.5× to 50×: on a linear axis the small ones vanish
        ax.set_xlim(min(0.5, min(values) * 0.8), max(values) * 1.8)
        save(fig, "speedup")

    for unit, what, xlabel, log_scale in (("MB/s", "throughput", "MB/s (more is better)", False),
                                          ("s", "times", "seconds (less is better, log scale)", True)):
        sel = [r for r in rows if r.get("unit") == unit and r.get("sshfs") and r.get("skein")]
        if not sel:
            continue
        fig, ax = plt.subplots(figsize=(9, 0.7 * len(sel) + 1.4))
        n = len(sel)
        ys = list(range(n))[::-1]
        h = 0.38
        ax.barh([y + h / 2 for y in ys], [r["sshfs"] for r in sel], h, label="sshfs", color="#999999")
        ax.barh([y - h / 2 for y in ys], [r["skein"] for r in sel], h, label="skein", color="#2a7ab9")
        ax.set_yticks(ys, [_label(r["workload"]) for r in sel], fontsize=7)
        if log_scale:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(title + f": {what}", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        save(fig, what)
    return written


def write(b, meta, out, draw_plots=True):
    """The markdown file OUT, its .json copy beside it, and the plots beside both."""
    out.parent.mkdir(parents=True, exist_ok=True)
    data = results_json(b, meta)
    plots = []
    if draw_plots:
        plots = plot(data["rows"], out.with_suffix(""), f"{meta['mode']} run, {meta['commit']}")
    md = markdown(b, meta, plots)
    print(md)
    out.write_text(md)
    out.with_suffix(".json").write_text(json.dumps(data, indent=2))
    log(f"results written to {out} (and {out.with_suffix('.json').name}"
        + "".join(f", {p.name}" for p in plots) + ")")


def plots_from(json_path, stem=None):
    """Draws the plots of an earlier run from its JSON copy (tests/bench/run --plots-from)."""
    json_path = Path(json_path)
    data = json.loads(json_path.read_text())
    meta = data.get("meta", {})
    paths = plot(data["rows"], Path(stem) if stem else json_path.with_suffix(""),
                 f"{meta.get('mode', '?')} run, {meta.get('commit', '?')}")
    for p in paths:
        print(p)
    return 0 if paths else 1
