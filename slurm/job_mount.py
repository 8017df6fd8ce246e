"""The node's side of skein's Slurm integration: mounting a job's scratch namespace in the prolog
and taking it away in the epilog (slurm/prolog, slurm/epilog). burst_buffer.lua makes and
destroys the namespace on the slurmctld host; this only mounts, with the node's certificate.

Configuration: the [gateway] and [node] tables of skein's Slurm configuration (docs/slurm.md),
found at $SKEIN_SLURM_CONFIG, else through a "# skein: config=PATH" line of the burst_buffer.conf
beside $SLURM_CONF, else at /etc/skein/slurm.toml. Messages go to standard error, which slurmd
logs, prefixed "skein prolog: job N:" or "skein epilog: job N:".
"""

import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import tomllib

DEFAULT_CONFIG = "/etc/skein/slurm.toml"


class HookError(Exception):
    """A failure the hook reports and exits non-zero for."""


class GatewayUnreachable(HookError):
    """The gateway did not answer: a failure of the gateway or the network, not of this node."""


# What gRPC says when no connection could be made or the gateway did not answer in time.
UNREACHABLE = re.compile(r"failed to connect|Connection refused|UNAVAILABLE|Deadline Exceeded|"
                         r"DEADLINE_EXCEEDED|cannot reach gateway|No route to host|Socket closed")


class Hook:
    def __init__(self, name):
        self.name = name
        self.job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or ""

    def say(self, message):
        print(f"skein {self.name}: job {self.job_id}: {message}", file=sys.stderr, flush=True)


def config_path():
    env = os.environ.get("SKEIN_SLURM_CONFIG")
    if env:
        return env
    slurm_conf = os.environ.get("SLURM_CONF")
    if slurm_conf:
        bb_conf = os.path.join(os.path.dirname(slurm_conf), "burst_buffer.conf")
        try:
            with open(bb_conf, encoding="utf-8") as f:
                for line in f:
                    m = re.match(r"\s*#\s*skein:\s*config\s*=\s*(\S+)", line)
                    if m:
                        return m.group(1)
        except OSError:
            pass
    return DEFAULT_CONFIG


def load_config():
    path = config_path()
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except OSError as e:
        raise HookError(f"cannot read skein's Slurm configuration {path}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise HookError(f"bad skein configuration {path}: {e}") from e
    if "address" not in config.get("gateway", {}):
        raise HookError(f"{path}: [gateway] needs address")
    config["_path"] = path
    return config


def mount_root(config):
    """mount_root as configured."""
    return config.get("node", {}).get("mount_root", "/scratch/job").rstrip("/") or "/"


def mount_point(config, job_id):
    """The job's mount point, below mount_root as it resolves: the kernel names mounts, and
    processes' working directories and files, by the resolved path, so a mount_root reached
    through a symlink would hide the job's mount and the processes in it from the epilog."""
    return os.path.join(os.path.realpath(mount_root(config)), job_id)


def skein_pools(config):
    return {p.get("name") for p in config.get("pool", []) if p.get("name")}


def job_uses_skein(config, job_id):
    """Whether the job asked for one of skein's pools (its BurstBuffer field, from scontrol).
    Asked only when the gateway cannot say (it has no namespace for the job, or does not
    answer), to tell a job to hold from one that did not ask for skein: scontrol's text holds
    the job's name and comment, the user's own, so a job can pass for skein's here. It then
    only holds itself, never the node."""
    out = tool(["scontrol", "show", "job", "-o", job_id])
    if out.returncode != 0:
        raise HookError(f"scontrol show job {job_id} failed: {out.stderr.strip()}")
    pools = skein_pools(config)
    return any(p in pools for p in re.findall(r"#BB_LUA[^\n]*?\bpool=(\S+)", out.stdout))


def mountinfo_entry(path):
    """The fstype of the mount at path, or None."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                mp = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
                if mp == path:
                    return fields[sep + 1]
    except OSError:
        pass
    return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def mount_daemons(path):
    """Pids of the skein-mount processes serving path (their argument list names it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        args = cmdline(entry)
        if args and os.path.basename(args[0]) == "skein-mount" and path in args:
            pids.append(int(entry))
    return pids


def stat_with_deadline(path, seconds):
    """os.stat(path) in a thread, so a mount that does not answer cannot hang the hook."""
    result = {}

    def target():
        try:
            result["stat"] = os.stat(path)
        except OSError as e:
            result["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        raise HookError(f"{path} did not answer within {seconds} s")
    if "error" in result:
        raise result["error"]
    return result["stat"]


def below(link, path):
    return link == path or link.startswith(path + "/")


def processes_using(path, spare):
    """Pids (not in spare) whose cwd, root, executable, open files or mappings are below path.
    Reads /proc's links only: nothing here touches the mount itself."""
    users = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in spare or pid == os.getpid():
            continue
        base = f"/proc/{pid}"
        hit = False
        try:
            links = [f"{base}/{name}" for name in ("cwd", "root", "exe")]
            links += [f"{base}/fd/{fd}" for fd in os.listdir(f"{base}/fd")]
            for link in links:
                try:
                    if below(os.readlink(link), path):
                        hit = True
                        break
                except OSError:
                    pass
            if not hit:
                with open(f"{base}/maps", encoding="utf-8", errors="replace") as f:
                    for line in f:
                        parts = line.split(None, 5)
                        if len(parts) == 6 and below(parts[5].strip(), path):
                            hit = True
                            break
        except OSError:
            continue
        if hit:
            users.append(pid)
    return users


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def end_processes(pids, grace):
    """SIGTERM, up to grace seconds, then SIGKILL; returns the pids that needed SIGKILL."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    stubborn = [p for p in pids if alive(p)]
    for pid in stubborn:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(alive(p) for p in stubborn):
        time.sleep(0.05)
    return stubborn


def umount(path, lazy=False):
    # -c: the path as given, not canonicalised first (a stat of it would wait for a mount daemon
    # that does not answer).
    args = ["umount", "-c", "-l", path] if lazy else ["umount", "-c", path]
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return False, f"{' '.join(args)} did not finish within 30 s"
    except OSError as e:
        return False, f"cannot run umount: {e.strerror}"
    return r.returncode == 0, r.stderr.strip()


# ---------------------------------------------------------------- prolog


def prolog():
    hook = Hook("prolog")
    try:
        config = load_config()
        job_id = hook.job_id
        if not job_id:
            raise HookError("no SLURM_JOB_ID in the environment: not run by slurmd?")
        uid = int(os.environ["SLURM_JOB_UID"])
        gid = int(os.environ["SLURM_JOB_GID"])
        # The gateway says first: a job that asked for skein is allocated only once its setup
        # made its namespace, so one without a namespace did not ask (slurmctld is asked only
        # then, and not by every node for every job). A job that did ask but has none (destroyed
        # meanwhile) is held; a prolog failure would drain the node.
        try:
            if mount_job(hook, config, job_id, uid, gid, absent_ok=True):
                return 0
            if not uses_skein_or_none(hook, config, job_id):
                return 0
            hook.say("the job asked for skein but the gateway has no namespace for it; "
                     "requeueing the job held")
            requeue_held(hook, job_id, "skein: the job's scratch namespace is gone")
        except GatewayUnreachable as e:
            if uses_skein_or_none(hook, config, job_id) is False:
                return 0  # the job did not ask for skein
            if config.get("node", {}).get("on_gateway_unreachable", "hold") != "hold":
                raise
            # The gateway is shared: a prolog failure would drain every node that starts a job
            # while it is away. The job goes back to the queue, held, with the reason instead.
            hook.say(f"{e}; requeueing the job held")
            requeue_held(hook, job_id, f"skein: cannot mount the job's scratch: gateway unreachable ({e})")
        except HookError as e:
            # Any other failure drains the node, but only a job that asked for skein has a reason
            # to: one that did not runs on without a scratch (a gateway that refuses this node's
            # certificate, or has no [jobs], must not take every node out of service).
            if uses_skein_or_none(hook, config, job_id) is not False:
                raise
            hook.say(f"{e}; the job did not ask for skein: it runs without a scratch")
            try:
                unmount_job(hook, config, job_id)
            except HookError as left:
                hook.say(str(left))
        return 0
    except HookError as e:
        hook.say(str(e))
        return 1


def uses_skein_or_none(hook, config, job_id):
    """job_uses_skein, or None (said) when slurmctld cannot tell."""
    try:
        return job_uses_skein(config, job_id)
    except HookError as e:
        hook.say(str(e))
        return None


# skein-mount's message when the gateway has no namespace for the job (NOT_FOUND).
NO_NAMESPACE = re.compile(r"no job namespace for job")


def mount_job(hook, config, job_id, uid, gid, absent_ok=False):
    """Mounts the job's namespace; True once mounted. With absent_ok, a gateway that has no
    namespace for the job is no error: the mount point made for it goes and False is returned."""
    node = config.get("node", {})
    gateway = config["gateway"]
    mp = mount_point(config, job_id)
    timeout = float(node.get("mount_timeout_s", 20))
    if mountinfo_entry(mp):
        try:
            st = stat_with_deadline(mp, timeout)
            if mountinfo_entry(mp) == "fuse.skein" and st.st_uid == uid:
                return True  # mounted already (the prolog ran before): nothing to do
        except (OSError, HookError):
            pass
        hook.say(f"{mp} holds a stale or foreign mount; replacing it")
        unmount_job(hook, config, job_id)
    make_mount_point(config, mp, uid, gid)
    log_dir = node.get("log_dir", "/var/log/skein")
    try:
        os.makedirs(log_dir, mode=0o755, exist_ok=True)
    except OSError as e:
        raise HookError(f"cannot make the mount logs' directory {log_dir}: {e}") from e
    args = [
        node.get("skein_mount", "skein-mount"),
        node.get("gateway_address") or gateway["address"],
        mp,
        "--job",
        gateway.get("job_prefix", "") + job_id,
        "--log-file",
        os.path.join(log_dir, f"job-{job_id}.log"),
        "-o",
        ",".join(["allow_other"] + list(node.get("mount_options", []))),
    ]
    for flag, key, table in (
        ("--ca-file", "ca_file", gateway),
        ("--tls-server-name", "tls_server_name", gateway),
        ("--cert-file", "cert_file", node),
        ("--key-file", "key_file", node),
    ):
        if table.get(key):
            args += [flag, table[key]]
    attempts = max(1, int(node.get("mount_attempts", 3)))
    problem = ""
    timed_out = False
    for attempt in range(attempts):
        if attempt:
            time.sleep(1)
            # What an attempt that timed out may have left (a mount, its daemon) goes first, or
            # the next would find the mount point taken, or mount a second time over it.
            if mountinfo_entry(mp) or mount_daemons(mp):
                unmount_job(hook, config, job_id)  # removes the mount point too
                make_mount_point(config, mp, uid, gid)
        try:
            r = run_mount(args, timeout)
        except OSError as e:
            raise HookError(f"cannot run {args[0]}: {e.strerror}") from e
        except subprocess.TimeoutExpired:
            problem = f"{args[0]} did not finish within {timeout:g} s (the gateway did not answer in time?)"
            timed_out = True
            continue
        timed_out = False
        if r.returncode == 0:
            break
        problem = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}")
        if absent_ok and NO_NAMESPACE.search(problem):
            try:
                os.rmdir(mp)
            except OSError:
                pass
            return False
    else:
        message = f"cannot mount the job's scratch on {mp}: {problem}"
        if timed_out and (mountinfo_entry(mp) or mount_daemons(mp)):
            unmount_job(hook, config, job_id)
        unreachable = timed_out or UNREACHABLE.search(problem)
        raise (GatewayUnreachable if unreachable else HookError)(message)
    try:
        st = stat_with_deadline(mp, timeout)
    except OSError as e:
        raise HookError(f"{mp} was mounted but does not answer: {e.strerror}") from e
    if st.st_uid != uid:
        raise HookError(f"{mp} is owned by uid {st.st_uid}, not the job's user {uid}")
    return True


def make_mount_point(config, mp, uid, gid):
    """Makes the job's mount point `mp`, the job's user's, below a checked mount_root."""
    try:
        os.makedirs(os.path.dirname(mp), mode=0o755, exist_ok=True)
        check_mount_root(mount_root(config))  # the path as configured and as it resolves
        try:
            os.mkdir(mp, 0o700)
        except FileExistsError:
            pass
        # The mount point as made, never what a name there leads to: a symlink left at the job's
        # name would have root give its target to the job's user and mount over it.
        st = os.lstat(mp)
        if not stat.S_ISDIR(st.st_mode):
            raise HookError(f"{mp} is not a directory (a symlink or file left there): not used")
        fd = os.open(mp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchown(fd, uid, gid)
        finally:
            os.close(fd)
    except OSError as e:
        raise HookError(f"cannot make the mount point {mp}: {e}") from e


def run_mount(args, timeout):
    """Runs skein-mount; its CompletedProcess, or TimeoutExpired once its whole process group
    was killed (subprocess.run kills only the child, and a child of its could live on and mount
    after the prolog gave up). start_new_session: slurmd kills the prolog's process group when
    the prolog ends, and the daemon skein-mount leaves behind must not be in it."""
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass  # a daemon that left the group still holds the pipes: not waited for
        p.wait()
        raise
    return subprocess.CompletedProcess(args, p.returncode, out, err)


def check_mount_root(root):
    """The directory the jobs' mount points are made in must be root's and writable by no one
    else, and so must every directory above it (or be sticky, as /tmp), both on the path as given
    and on the path it resolves to: a user who could put a symlink at a mount point's name, or
    on the way to it, would have root chown and mount over whatever that leads to."""
    root = os.path.abspath(root)
    for start in (root, os.path.realpath(root)):
        path = start
        while True:
            st = os.lstat(path)
            writable = st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)
            if st.st_uid != 0 or (writable and (path == start or not st.st_mode & stat.S_ISVTX)):
                raise HookError(f"{path} (on the way to the mount points' directory {root}) must "
                                "be root's and writable by no one else")
            if path == "/":
                break
            path = os.path.dirname(path)


def tool(args):
    """Runs a Slurm command (scontrol, squeue, scancel) as the hook's user; its result, or
    HookError when it cannot run or does not finish within 30 s."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HookError(f"{' '.join(args)}: {e}") from e


def job_state(job_id):
    """The job's state from squeue's one field (no text of the user's around it), or ""."""
    try:
        r = tool(["squeue", "-h", "-j", job_id, "-o", "%T"])
    except HookError:
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


# States of a job that is back in the queue already, or on its way there: another node's prolog
# requeued it (squeue prints a flag such as COMPLETING or REQUEUED instead of PENDING meanwhile).
REQUEUED_STATES = {"PENDING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"}


def requeue_held(hook, job_id, reason):
    """Puts the job back in the queue, held, with reason in its Comment (scontrol, as root). The
    prologs of a job's other nodes find it requeued already: done. A job that may not be requeued
    (--no-requeue, JobRequeue=0, an interactive job: only batch jobs are) is cancelled with the
    reason instead: a prolog failure would drain the node."""
    r = tool(["scontrol", "requeuehold", job_id])
    cancel = r.returncode != 0 and job_state(job_id) not in REQUEUED_STATES
    why = r.stderr.lower()
    if cancel and "disabled" not in why and "requeue" not in why and "batch" not in why:
        raise HookError(f"scontrol requeuehold {job_id} failed: {r.stderr.strip()}")
    u = tool(["scontrol", "update", f"JobId={job_id}", f"Comment={reason[:250]}"])
    if u.returncode != 0:
        hook.say(f"scontrol update JobId={job_id} Comment=... failed: {u.stderr.strip()}")
    if cancel:
        hook.say(f"the job may not be requeued ({r.stderr.strip()}): cancelling it")
        c = tool(["scancel", job_id])
        if c.returncode != 0:
            raise HookError(f"scancel {job_id} failed: {c.stderr.strip()}")


# ---------------------------------------------------------------- epilog


def epilog():
    hook = Hook("epilog")
    try:
        config = load_config()
        if not hook.job_id:
            raise HookError("no SLURM_JOB_ID in the environment: not run by slurmd?")
        unmount_job(hook, config, hook.job_id)
        return 0
    except HookError as e:
        hook.say(str(e))
        return 1


def unmount_job(hook, config, job_id):
    """Ends whatever holds files below the mount, unmounts (lazily as the last resort), ends the
    mount process and removes the mount point. Raises HookError if a mount or process is left."""
    node = config.get("node", {})
    grace = float(node.get("kill_grace_s", 2))
    mp = mount_point(config, job_id)
    daemons = mount_daemons(mp)
    if not mountinfo_entry(mp) and not daemons:
        try:
            os.rmdir(mp)
        except OSError:
            pass
        return
    users = processes_using(mp, set(daemons))
    if users:
        hook.say(f"ending {len(users)} processes still using {mp}: {' '.join(map(str, users))}")
        end_processes(users, grace)
    if mountinfo_entry(mp):
        ok, why = umount(mp)
        if not ok:
            users = processes_using(mp, set(daemons))
            if users:
                end_processes(users, grace)
            ok, why = umount(mp)
        if not ok:
            hook.say(f"umount {mp} failed ({why}); detaching it lazily")
            umount(mp, lazy=True)
    # The daemon ends once its mount is gone; one that does not is ended.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(alive(p) for p in daemons):
        time.sleep(0.05)
    left = [p for p in daemons if alive(p)]
    if left:
        hook.say(f"mount process {' '.join(map(str, left))} did not exit after the unmount; ending it")
        end_processes(left, grace)
    if mountinfo_entry(mp):
        umount(mp, lazy=True)
    try:
        os.rmdir(mp)
    except OSError:
        pass
    if mountinfo_entry(mp):
        raise HookError(f"{mp} is still mounted")
    left = [p for p in mount_daemons(mp) if alive(p)]
    if left:
        raise HookError(f"mount process {' '.join(map(str, left))} of {mp} is still running")
