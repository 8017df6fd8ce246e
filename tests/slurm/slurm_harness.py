"""A skein cluster (deploy/skein-local) and a single-node Slurm (tests/slurm/slurm-local) with
skein's burst buffer, prolog and epilog, and two unprivileged users who submit jobs with sbatch.
Used by slurm_test.py and bench.py. Everything lives below $SKEIN_TEST_TMP/<name>; close() takes
it all down (jobs, Slurm's daemons, mounts, mount processes, the skein cluster, the users) and is
safe to call after a failed or partial start, and from a signal handler's unwinding.
"""

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("SKEIN_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("SKEIN_BUILD_DIR") or os.path.join(SOURCE, "build")
SKEIN_LOCAL = os.environ.get("SKEIN_LOCAL") or os.path.join(SOURCE, "deploy", "skein-local")
SLURM_LOCAL = os.path.join(HERE, "slurm-local")
USERS = ("skein-sl-a", "skein-sl-b")
POOL = "skein"
# How long after its job ended the reaper leaves a namespace to its teardown (docs/slurm.md).
REAP_GRACE_S = 5

SLURM_PROGRAMS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "sbatch", "scontrol", "lua5.1")


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, _frame):
    raise Interrupted(f"signal {signum}")


def install_signal_handlers():
    """SIGTERM/SIGINT/SIGHUP unwind through the finally blocks, so close() still runs."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _raise_interrupted)


def missing_slurm():
    return [p for p in SLURM_PROGRAMS if not shutil.which(p)]


def run(args, check=True, env=None, timeout=120, **kw):
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout, check=False, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip() or r.stdout.strip()}")
    return r


def read_env_file(path):
    env = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"export (\w+)='(.*)'$", line.strip())
            if m:
                env[m.group(1)] = m.group(2).replace("'\\''", "'")
    return env


def mountinfo_has(path):
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return any(line.split()[4] == path for line in f)


def mounts_below(root):
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            mp = line.split()[4]
            if mp == root or mp.startswith(root + "/"):
                out.append(mp)
    return out


def procs_mentioning(needle, name=None):
    pids = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            with open(f"/proc/{e}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if not args or (name and os.path.basename(args[0]) != name):
            continue
        if any(needle in a for a in args):
            pids.append(int(e))
    return pids


class Cluster:
    def __init__(self, name="slurm"):
        tmp = os.environ.get("SKEIN_TEST_TMP")
        if not tmp:
            raise RuntimeError("SKEIN_TEST_TMP is not set (run through tests/run or ctest)")
        self.dir = os.path.join(os.path.realpath(tmp), name)
        self.skein_state = os.path.join(self.dir, "skein")
        self.slurm_state = os.path.join(self.dir, "slurmd-state")
        self.scratch_root = os.path.join(self.dir, "scratch")
        self.config_path = os.path.join(self.dir, "etc", "slurm.toml")
        self.reaper_log_path = os.path.join(self.dir, "reaper.log")
        self.skein_env = {}
        self.slurm_env = {}
        self.users_made = []
        self.skein_up = False
        self.slurm_up = False

    # ------------------------------------------------------------ bring-up

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        os.makedirs(os.path.join(self.dir, "etc"), exist_ok=True)
        env = dict(os.environ, SKEIN_BUILD_DIR=BUILD, SKEIN_LOCAL_NO_BUILD="1")
        self.skein_up = True  # from here on close() takes it down, even after a failed up
        run([SKEIN_LOCAL, "up", "--servers", "2", "--mounts", "0", "--state", self.skein_state], env=env,
            timeout=120)
        self.skein_env = read_env_file(os.path.join(self.skein_state, "env"))
        self.write_config()
        self.make_users()
        self.slurm_up = True
        run([SLURM_LOCAL, "up", "--state", self.slurm_state, "--skein-config", self.config_path], timeout=120)
        self.slurm_env = read_env_file(os.path.join(self.slurm_state, "env"))
        return self

    def write_config(self, node_gateway=None, reap=True, skein_mount=None, mount_root=None):
        e = self.skein_env
        os.makedirs(os.path.join(self.dir, "mount-logs"), exist_ok=True)
        text = f"""# skein's Slurm configuration for the test cluster in {self.dir}
[gateway]
address = "{e['SKEIN_GATEWAY']}"
ca_file = "{e['SKEIN_CA_FILE']}"

[controller]
skeinctl = "{BUILD}/client/skeinctl"
admin_cert = "{e['SKEIN_ADMIN_CERT']}"
admin_key = "{e['SKEIN_ADMIN_KEY']}"
admin_token_file = "{e['SKEIN_ADMIN_TOKEN_FILE']}"
reaper_log = "{self.reaper_log_path}"
reap_grace_s = {REAP_GRACE_S}
reap = {"true" if reap else "false"}

[node]
skein_mount = "{skein_mount or BUILD + '/client/skein-mount'}"
cert_file = "{e['SKEIN_NODE_CERT']}"
key_file = "{e['SKEIN_NODE_KEY']}"
mount_root = "{mount_root or self.scratch_root}"
log_dir = "{self.dir}/mount-logs"
mount_attempts = 1
{f'gateway_address = "{node_gateway}"' if node_gateway else ""}

[[pool]]
name = "{POOL}"
gateway_pool = "scratch"
capacity = "1T"
granularity = "1M"

[staging]
namespace = "default"
# every user may stage from and to their own directory on server 0's export
allow = ["/srv0/users/$USER"]
"""
        tmp = self.config_path + ".new"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def make_users(self):
        for user in USERS:
            self.remove_user(user)  # a previous run that was killed may have left it
            run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/bin/bash",
                 "--user-group", user])
            self.users_made.append(user)
            work = self.workdir(user)
            os.makedirs(work, exist_ok=True)
            pw = pwd.getpwnam(user)
            os.chown(work, pw.pw_uid, pw.pw_gid)

    @staticmethod
    def remove_user(user):
        try:
            pwd.getpwnam(user)
        except KeyError:
            return
        subprocess.run(["userdel", "--force", user], capture_output=True, check=False)

    def workdir(self, user):
        return os.path.join(self.dir, "work", user)

    # ------------------------------------------------------------ teardown

    def close(self):
        errors = []

        def attempt(what, fn):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - teardown goes on whatever fails
                errors.append(f"{what}: {e}")

        if self.slurm_up and self.slurm_env:
            attempt("scancel", lambda: run(["scancel", "--full", "--quiet", "-u", USERS[0]], check=False,
                                           env=self.env()))
            attempt("scancel", lambda: run(["scancel", "--full", "--quiet", "-u", USERS[1]], check=False,
                                           env=self.env()))
            attempt("wait for jobs", lambda: self.wait_idle(20))
        if self.slurm_up:
            attempt("slurm-local down", lambda: run([SLURM_LOCAL, "down", "--state", self.slurm_state],
                                                    timeout=60))
        attempt("reaper", self.end_reapers)
        attempt("mounts", self.clean_mounts)
        if self.skein_up:
            attempt("skein-local down", lambda: run([SKEIN_LOCAL, "down", "--state", self.skein_state],
                                                    timeout=60))
        for user in self.users_made:
            attempt(f"userdel {user}", lambda u=user: self.remove_user(u))
        if errors:
            print("teardown problems: " + "; ".join(errors), file=sys.stderr)

    def end_reapers(self):
        """The reaper runs detached from slurmctld (setsid); one may still run after Slurm is down."""
        for pid in procs_mentioning(self.burst_buffer_script()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def burst_buffer_script(self):
        return os.path.join(self.slurm_state, "etc", "burst_buffer.lua")

    def reap_by_hand(self, *args):
        """`lua5.1 burst_buffer.lua reap ARGS`, as an admin runs it."""
        return run(["lua5.1", self.burst_buffer_script(), "reap", *args], check=False,
                   env=self.env(SKEIN_SLURM_CONFIG=self.config_path))

    def wait_no_reaper(self, seconds=60):
        """Until no reaper started by slurmctld runs any more."""
        deadline = time.monotonic() + seconds
        while procs_mentioning(self.burst_buffer_script()) and time.monotonic() < deadline:
            time.sleep(0.2)

    def reaper_log(self):
        try:
            with open(self.reaper_log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def clean_mounts(self):
        for pid in procs_mentioning(self.scratch_root, "skein-mount"):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for mp in sorted(mounts_below(self.dir), reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True, check=False)

    def wait_idle(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            r = run(["squeue", "-h", "-o", "%i"], check=False, env=self.env())
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(0.3)

    # ------------------------------------------------------------ using it

    def env(self, **extra):
        return dict(os.environ, SLURM_CONF=self.slurm_env["SLURM_CONF"], **extra)

    def skein_cmd_env(self):
        return dict(os.environ, **self.skein_env)

    def skeinctl(self, *args, check=True):
        return run([f"{BUILD}/client/skeinctl", "--json", *args], check=check, env=self.skein_cmd_env())

    def job_namespaces(self):
        out = self.skeinctl("ns", "list").stdout
        return {n["job_id"] for n in json.loads(out)["job_namespaces"]}

    def sbatch(self, user, script, *options):
        """Submits script (text) as user; returns (job id or None, the sbatch result)."""
        work = self.workdir(user)
        n = len([f for f in os.listdir(work) if f.startswith("job-") and f.endswith(".sh")])
        path = os.path.join(work, f"job-{n}.sh")
        with open(path, "w", encoding="utf-8") as f:
            f.write(script)
        os.chmod(path, 0o755)
        r = run(["runuser", "-u", user, "--", "sbatch", "--parsable", "--chdir", work, "-o",
                 os.path.join(work, "out-%j"), *options, path], check=False, env=self.env())
        job = r.stdout.strip().split(";")[0] if r.returncode == 0 else None
        return job, r

    def job(self, job_id):
        r = run(["scontrol", "show", "job", "-o", job_id], check=False, env=self.env())
        # One line (-o); values may hold spaces (Comment, SystemComment): each runs to the next
        # " Key=" (keys are capitalised words, possibly with ':' or '/').
        fields = {}
        for m in re.finditer(r"(?:^|\s)([A-Z][\w:/]*)=(.*?)(?=\s[A-Z][\w:/]*=|$)", r.stdout.strip(), re.S):
            fields.setdefault(m.group(1), m.group(2).strip())
        # The state from squeue's one field: a job's name may hold " JobState=..." before the real one.
        s = run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], check=False, env=self.env())
        if s.returncode == 0 and s.stdout.strip():
            fields["JobState"] = s.stdout.strip()
        return fields

    def wait_job(self, job_id, states=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"), seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            state = self.job(job_id).get("JobState")
            if state in states:
                return state
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} did not reach {'/'.join(states)} in {seconds} s "
                             f"(it is {self.job(job_id).get('JobState')})")

    def output(self, user, job_id):
        try:
            with open(os.path.join(self.workdir(user), f"out-{job_id}"), encoding="utf-8") as f:
                return f.read()
        except OSError:
            return ""

    def mount_point(self, job_id):
        return os.path.join(self.scratch_root, job_id)

    def leftovers(self, job_id):
        """What of job_id is still there: its mount, its mount process, its namespace."""
        mp = self.mount_point(job_id)
        left = []
        if mountinfo_has(mp):
            left.append(f"mount {mp}")
        pids = procs_mentioning(mp, "skein-mount")
        if pids:
            left.append(f"mount process {pids}")
        if job_id in self.job_namespaces():
            left.append(f"namespace job-{job_id}")
        return left

    def wait_clean(self, job_id, seconds=45):
        deadline = time.monotonic() + seconds
        while True:
            left = self.leftovers(job_id)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def slurmctld_log(self):
        with open(os.path.join(self.slurm_state, "log", "slurmctld.log"), encoding="utf-8", errors="replace") as f:
            return f.read()


def free_port():
    """A loopback port where nothing listens (bound once, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
