#!/usr/bin/env python3
"""skein's Slurm integration on a real Slurm (Debian's slurm-wlm: munge, slurmctld, slurmd on this
machine) and a real skein cluster: jobs submitted with sbatch by two unprivileged users get a
scratch namespace mounted at their first line, private to them, staged in and out, and nothing of
it is left after the job however it ends. Bad directives are refused at sbatch; a gateway that is
down holds the job with the reason and leaves the node in service.

Run by ctest as slurm.burst_buffer (tests/CMakeLists.txt). Without Slurm installed it exits 77
(skipped), but with CI=true that fails the run, as does a daemon that does not start.
Prints one PASS/FAIL line per test and 'N passed, N failed' last.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_harness as h  # noqa: E402

A, B = h.USERS
BB = f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein width=2\n"


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def assert_clean(c, job_id):
    left = c.wait_clean(job_id)
    check(not left, f"job {job_id} left behind: {', '.join(left)}")


def wait_file(path, seconds=30):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {seconds} s")
        time.sleep(0.1)


# ---------------------------------------------------------------- tests


def test_scratch_is_mounted_private_at_first_line(c):
    job, r = c.sbatch(A, f"""#!/bin/bash
{BB}echo "scratch=$SKEIN_SCRATCH"
stat -c 'owner=%U mode=%a' "$SKEIN_SCRATCH"
awk -v p="$SKEIN_SCRATCH" '$5 == p {{ print "fstype=" $(NF-2) }}' /proc/self/mountinfo
echo written > "$SKEIN_SCRATCH/f" && echo "read=$(cat "$SKEIN_SCRATCH/f")"
sleep 1
""", "--time=20")
    check(job, f"sbatch refused: {r.stderr}")
    # Without a lifetime directive the namespace lives as long as the job may (20 min), and a day.
    deadline = time.monotonic() + 30
    made = []
    while not made and time.monotonic() < deadline:
        made = [n for n in json.loads(c.skeinctl("ns", "list").stdout)["job_namespaces"] if n["job_id"] == job]
        time.sleep(0.2)
    check(made, f"no namespace for job {job}")
    lifetime = made[0]["expires_s"] - made[0]["created_s"]
    check(lifetime == 20 * 60 + 86400, f"job {job}'s namespace lives {lifetime} s, not its time limit and a day")
    state = c.wait_job(job)
    out = c.output(A, job)
    check(state == "COMPLETED", f"job {job} ended {state}: {out}")
    lines = out.splitlines()
    check(lines and lines[0] == f"scratch={c.mount_point(job)}", f"first line is not SKEIN_SCRATCH: {out!r}")
    check(f"owner={A} mode=700" in out, f"scratch not owned by {A} with mode 0700: {out!r}")
    check("fstype=fuse.skein" in out, f"scratch was not a skein mount at the first line: {out!r}")
    check("read=written" in out, f"scratch did not keep a file: {out!r}")
    assert_clean(c, job)


def test_two_running_jobs_cannot_see_each_others_scratch(c):
    # Each job publishes its scratch path, waits for the other's, then tries to look into it.
    share = os.path.join(c.dir, "work", "share")
    os.makedirs(share, exist_ok=True)
    os.chmod(share, 0o1777)
    script = f"""#!/bin/bash
{BB}echo secret-$SLURM_JOB_ID > "$SKEIN_SCRATCH/secret"
echo "$SKEIN_SCRATCH" > {share}/$SLURM_JOB_ID
for i in $(seq 200); do [ "$(ls {share} | wc -l)" -ge 2 ] && break; sleep 0.1; done
for f in {share}/*; do
  other=$(cat "$f")
  [ "$other" = "$SKEIN_SCRATCH" ] && continue
  if ls "$other" >/dev/null 2>&1; then echo "listed $other"; else echo "cannot list $other"; fi
  if cat "$other/secret" >/dev/null 2>&1; then echo "read $other"; else echo "cannot read $other"; fi
done
ls "$SKEIN_SCRATCH"
"""
    ja, ra = c.sbatch(A, script)
    jb, rb = c.sbatch(B, script)
    check(ja and jb, f"sbatch refused: {ra.stderr} {rb.stderr}")
    for job, user in ((ja, A), (jb, B)):
        state = c.wait_job(job)
        out = c.output(user, job)
        check(state == "COMPLETED", f"job {job} ended {state}: {out}")
        check("cannot list" in out and "cannot read" in out, f"job {job} saw no other scratch to try: {out!r}")
        seen = [line for line in out.splitlines() if line.startswith(("listed ", "read "))]
        check(not seen, f"job {job} of {user} saw the other's scratch: {seen}")
        check(out.strip().splitlines()[-1] == "secret", f"job {job}'s scratch holds more than its own: {out!r}")
    for job in (ja, jb):
        assert_clean(c, job)


def test_each_task_of_a_job_array_gets_a_scratch_of_its_own(c):
    # Each task of an array is a job of its own (SLURM_JOB_ID), with a namespace of its own: made,
    # mounted at its first line, seen by no other task, and gone with the task.
    job, r = c.sbatch(A, f"""#!/bin/bash
{BB}echo "task=$SLURM_ARRAY_TASK_ID job=$SLURM_JOB_ID scratch=$SKEIN_SCRATCH"
awk -v p="$SKEIN_SCRATCH" '$5 == p {{ print "fstype=" $(NF-2) }}' /proc/self/mountinfo
echo "$SLURM_ARRAY_TASK_ID" > "$SKEIN_SCRATCH/task-$SLURM_ARRAY_TASK_ID"
sleep 1
echo "holds: $(ls "$SKEIN_SCRATCH")"
""", "--time=5", "--array=0-2", "-o", os.path.join(c.workdir(A), "out-%A_%a"))
    check(job, f"sbatch refused: {r.stderr}")
    deadline = time.monotonic() + 90
    states = {}
    while time.monotonic() < deadline:
        q = h.run(["squeue", "-h", "-t", "all", "-r", "-j", job, "-o", "%i %T"], check=False, env=c.env())
        states = dict(line.split()[:2] for line in q.stdout.splitlines() if len(line.split()) >= 2)
        if len(states) == 3 and all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for s in states.values()):
            break
        time.sleep(0.2)
    check(len(states) == 3 and set(states.values()) == {"COMPLETED"}, f"array {job}'s tasks: {states}")
    task_jobs = set()
    for task in range(3):
        with open(os.path.join(c.workdir(A), f"out-{job}_{task}"), encoding="utf-8") as f:
            out = f.read()
        first = out.splitlines()[0] if out else ""
        fields = dict(kv.split("=", 1) for kv in first.split() if "=" in kv)
        task_job = fields.get("job", "")
        check(fields.get("task") == str(task) and task_job, f"task {task} of array {job}: {out!r}")
        check(fields.get("scratch") == c.mount_point(task_job), f"task {task}'s SKEIN_SCRATCH is not its own: {out!r}")
        check("fstype=fuse.skein" in out, f"task {task}'s scratch was not a skein mount: {out!r}")
        check(f"holds: task-{task}\n" in out, f"task {task}'s scratch holds more than its own file: {out!r}")
        task_jobs.add(task_job)
    check(len(task_jobs) == 3, f"the array's tasks shared a job id: {task_jobs}")
    for task_job in task_jobs:
        assert_clean(c, task_job)


def test_stage_in_and_out_byte_for_byte(c):
    export0 = c.skein_env["SKEIN_EXPORTS"].split()[0]
    home = os.path.join(export0, "users", A)
    src = os.path.join(home, "in")
    os.makedirs(os.path.join(src, "sub"), exist_ok=True)
    files = {"a.bin": os.urandom(3 << 20), "sub/b.txt": b"hello\n" * 1000, "empty": b""}
    for name, data in files.items():
        with open(os.path.join(src, name), "wb") as f:
            f.write(data)
    sums = {n: hashlib.sha256(d).hexdigest() for n, d in files.items()}
    job, r = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein width=2 stage_in=/srv0/users/{A}/in:/input stage_out=/results:/srv0/users/{A}/out/$SLURM_JOB_ID
cd "$SKEIN_SCRATCH/input" && sha256sum a.bin sub/b.txt empty
mkdir -p "$SKEIN_SCRATCH/results/deep"
cp a.bin "$SKEIN_SCRATCH/results/deep/copy.bin"
echo done > "$SKEIN_SCRATCH/results/flag"
""")
    check(job, f"sbatch refused: {r.stderr}")
    state = c.wait_job(job, seconds=90)
    out = c.output(A, job)
    check(state == "COMPLETED", f"job {job} ended {state} ({c.job(job).get('Reason')}): {out}")
    for name, digest in sums.items():
        check(f"{digest}  {name}" in out, f"stage-in of {name} differs at the job's start: {out!r}")
    # Stage-out runs after the job; teardown after it.
    left = c.wait_clean(job, seconds=60)
    check(not left, f"job {job} left behind: {', '.join(left)}")
    dest = os.path.join(home, "out", job)
    with open(os.path.join(dest, "deep", "copy.bin"), "rb") as f:
        check(f.read() == files["a.bin"], "stage-out copy.bin differs from what the job wrote")
    with open(os.path.join(dest, "flag"), "rb") as f:
        check(f.read() == b"done\n", "stage-out flag differs")


def test_mpi_job_bcasts_and_stages_its_scratch_with_srun(c):
    """An MPI job of an unprivileged user runs skein-mpi under srun on its own scratch: bcast fills
    the mount's page cache, stage-in copies a tree out of it with its small files fetched
    several at a time, and stage-out copies it back with its small files stored several at a
    time (WriteFiles into the job's namespace). All go through the mount's control socket,
    which the prolog's mount (run as root) opens to the job's user and to nobody else."""
    skein_mpi = os.path.join(h.BUILD, "client", "skein-mpi")
    check(os.access(skein_mpi, os.X_OK), f"{skein_mpi} is not built (it needs libopenmpi-dev)")
    export0 = c.skein_env["SKEIN_EXPORTS"].split()[0]
    src = os.path.join(export0, "users", A, "mpi-in")
    os.makedirs(os.path.join(src, "sub"), exist_ok=True)
    files = {"big.bin": os.urandom(6 << 20)}
    files.update({f"sub/s{i:02d}": os.urandom(1000 + i) for i in range(40)})
    for name, data in files.items():
        with open(os.path.join(src, name), "wb") as f:
            f.write(data)
    work = c.workdir(A)
    ready, go = os.path.join(work, "mpi-ready"), os.path.join(work, "mpi-go")
    job, r = c.sbatch(A, f"""#!/bin/bash
#SBATCH --ntasks=2
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein width=2 stage_in=/srv0/users/{A}/mpi-in:/input
srun --mpi=pmix -n 2 {skein_mpi} bcast "$SKEIN_SCRATCH/input" || echo "bcast failed"
srun --mpi=pmix -n 2 {skein_mpi} stage-in "$SKEIN_SCRATCH/input" {work}/copy-$SLURM_JOB_ID || echo "stage-in failed"
srun --mpi=pmix -n 2 {skein_mpi} stage-out {work}/copy-$SLURM_JOB_ID "$SKEIN_SCRATCH/back" || echo "stage-out failed"
diff -r {work}/copy-$SLURM_JOB_ID "$SKEIN_SCRATCH/back" && echo "stage-out copy is the same"
touch {ready}
for i in $(seq 300); do [ -e {go} ] && break; sleep 0.1; done
""")
    check(job, f"sbatch refused: {r.stderr}")
    try:
        wait_file(ready, seconds=90)
        # The other user cannot use the job's control socket: the socket's mode keeps them out,
        # and the mount's check of its peer (SO_PEERCRED) would, were the mode ever opened.
        mp = c.mount_point(job)
        status = h.run(["runuser", "-u", B, "--", os.path.join(h.BUILD, "client", "skein-mount"),
                        "--status", mp, "--control-dir", "/run/skein"], check=False)
        check(status.returncode != 0 and "Permission denied" in status.stderr,
              f"{B} used the control socket of {A}'s job: {status.stdout!r} {status.stderr!r}")
        link = "".join(ch if ch.isalnum() or ch in "._-" else f"%{ord(ch):02X}" for ch in mp)
        sock = os.path.realpath(os.path.join("/run/skein/by-mountpoint", link))
        check(sock.endswith(".sock") and os.path.exists(sock), f"no control socket for {mp}: {sock}")
        mode = os.stat(sock).st_mode & 0o777
        os.chmod(sock, 0o666)
        try:
            probe = h.run(["runuser", "-u", B, "--", "python3", "-c",
                           "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
                           "s.sendall(b'status\\n'); print(s.recv(200).decode())", sock], check=False)
        finally:
            os.chmod(sock, mode)
        check("error: permission denied" in probe.stdout,
              f"the mount answered {B}, who is not the job's user: {probe.stdout!r} {probe.stderr!r}")
    finally:
        with open(go, "w"):
            pass
    state = c.wait_job(job, seconds=90)
    out = c.output(A, job)
    check(state == "COMPLETED", f"job {job} ended {state}: {out}")
    check("failed" not in out, f"skein-mpi failed in the job: {out}")
    total = sum(len(d) for d in files.values())
    check(f"broadcast 41 files, {total} bytes fetched once, into 1 nodes' page cache" in out,
          f"bcast did not fetch the tree once: {out!r}")
    check("40 of them fetched several at a time" in out,
          f"stage-in did not fetch the small files through the control socket: {out!r}")
    check("40 stored several at a time" in out and "stage-out copy is the same" in out,
          f"stage-out did not store the small files into the scratch through the control socket: "
          f"{out!r}")
    copy = os.path.join(work, f"copy-{job}")
    for name, data in files.items():
        with open(os.path.join(copy, name), "rb") as f:
            check(f.read() == data, f"the job's stage-in copy of {name} differs")
    shutil.rmtree(copy, ignore_errors=True)
    assert_clean(c, job)


def test_cleanup_after_scancel_of_a_running_job(c):
    job, r = c.sbatch(A, f"""#!/bin/bash
{BB}cd "$SKEIN_SCRATCH" && exec 3>"$SKEIN_SCRATCH/held" && touch "{c.workdir(A)}/ready-$SLURM_JOB_ID"
sleep 300
""")
    check(job, f"sbatch refused: {r.stderr}")
    wait_file(os.path.join(c.workdir(A), f"ready-{job}"))
    # The prolog again, for the running job: it must find the mount and leave it as it is.
    mp = c.mount_point(job)
    before = h.procs_mentioning(mp, "skein-mount")
    env = c.env(SLURM_JOB_ID=job, SLURM_JOB_UID=str(h.pwd.getpwnam(A).pw_uid),
                SLURM_JOB_GID=str(h.pwd.getpwnam(A).pw_gid))
    again = subprocess.run([os.path.join(h.SOURCE, "slurm", "prolog")], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    check(again.returncode == 0, f"prolog run again failed: {again.stderr}")
    check(h.procs_mentioning(mp, "skein-mount") == before and len(before) == 1,
          f"prolog run again changed the mount processes: {before} -> {h.procs_mentioning(mp, 'skein-mount')}")
    h.run(["scancel", job], env=c.env())
    state = c.wait_job(job)
    check(state == "CANCELLED", f"job {job} ended {state}")
    assert_clean(c, job)


def test_bbstat_shows_a_user_their_own_namespaces_and_root_every_one(c):
    # `scontrol show bbstat` tells of the job namespaces: another user's jobs, owners and usage are
    # not everyone's to see. Slurm 22.05 does not say who asks: then everyone gets the sums only.
    jobs = {}
    for user in (A, B):
        job, r = c.sbatch(user, f"""#!/bin/bash
{BB}head -c 3000 /dev/zero > "$SKEIN_SCRATCH/some" && touch "{c.workdir(user)}/ready-$SLURM_JOB_ID"
sleep 300
""")
        check(job, f"sbatch refused: {r.stderr}")
        jobs[user] = job
    try:
        for user, job in jobs.items():
            wait_file(os.path.join(c.workdir(user), f"ready-{job}"))

        def bbstat(user):
            cmd = ["scontrol", "show", "bbstat"]
            r = h.run(["runuser", "-u", user, "--", *cmd] if user else cmd, check=False, env=c.env())
            check(r.returncode == 0, f"scontrol show bbstat as {user or 'root'}: {r.stdout} {r.stderr}")
            rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[1:] if line.strip()}
            return r.stdout, rows

        text, everyone = bbstat(None)
        if text.startswith("skein: "):  # who asks is not known
            check(text.startswith("skein: 2 job namespaces, 6000 bytes in 2 inodes"), f"root's bbstat: {text!r}")
            for user in jobs:
                own, _ = bbstat(user)
                check(own == text, f"{user}'s bbstat is not the sums only: {own!r}")
        else:
            check(set(jobs.values()) <= set(everyone), f"root's bbstat lacks a job: {text!r}")
            for user, job in jobs.items():
                row = everyone[job]
                check(row[1] == str(h.pwd.getpwnam(user).pw_uid), f"job {job}'s owner is not {user}: {row}")
                check(row[2] == "3000", f"job {job} holds 3000 bytes, bbstat says {row}")
                own_text, own = bbstat(user)
                check(set(own) == {job}, f"{user}'s bbstat shows {own_text!r}, not only job {job}")
    finally:
        for job in jobs.values():
            h.run(["scancel", job], check=False, env=c.env())
        for job in jobs.values():
            c.wait_job(job)
    for job in jobs.values():
        assert_clean(c, job)


def test_cleanup_after_a_failing_job_that_left_a_process_in_scratch(c):
    # The job fails, leaving a process outside Slurm's tracking with a file open in its scratch:
    # the epilog must end it to unmount.
    job, r = c.sbatch(B, f"""#!/bin/bash
{BB}cd /
setsid bash -c 'exec 3>"$SKEIN_SCRATCH/held"; cd "$SKEIN_SCRATCH"; exec sleep 300' </dev/null >/dev/null 2>&1 &
sleep 0.5
exit 3
""")
    check(job, f"sbatch refused: {r.stderr}")
    state = c.wait_job(job)
    check(state == "FAILED", f"job {job} ended {state}")
    assert_clean(c, job)
    stray = [p for p in h.procs_mentioning("sleep") if os.path.exists(f"/proc/{p}") and
             os.stat(f"/proc/{p}").st_uid == h.pwd.getpwnam(B).pw_uid]
    check(not stray, f"the job's stray process {stray} outlived the epilog")


def test_a_mount_root_reached_through_a_symlink_is_cleaned_up(c):
    # The kernel names the mount, and the working directory of a process in it, by the resolved
    # path: an epilog that looked for mount_root as written found neither, left the process and
    # detached the mount lazily.
    link = os.path.join(c.dir, "scratch-link")
    if not os.path.islink(link):
        os.symlink(c.scratch_root, link)
    c.write_config(mount_root=link)
    try:
        job, r = c.sbatch(B, f"""#!/bin/bash
{BB}cd /
setsid bash -c 'exec 3>"$SKEIN_SCRATCH/held"; cd "$SKEIN_SCRATCH"; exec sleep 300' </dev/null >/dev/null 2>&1 &
sleep 0.5
echo scratch "$SKEIN_SCRATCH"
""")
        check(job, f"sbatch refused: {r.stderr}")
        state = c.wait_job(job)
        check(state == "COMPLETED", f"job {job} ended {state} ({c.job(job).get('Reason')})")
        check(f"scratch {link}/{job}" in c.output(B, job), f"SKEIN_SCRATCH is not below {link}: {c.output(B, job)!r}")
        assert_clean(c, job)
        stray = [p for p in h.procs_mentioning("sleep") if os.path.exists(f"/proc/{p}") and
                 os.stat(f"/proc/{p}").st_uid == h.pwd.getpwnam(B).pw_uid]
        check(not stray, f"the job's stray process {stray} outlived the epilog")
    finally:
        c.write_config()


def test_cleanup_after_the_mount_process_was_killed(c):
    job, r = c.sbatch(A, f"""#!/bin/bash
{BB}touch "{c.workdir(A)}/ready-$SLURM_JOB_ID"
for i in $(seq 100); do [ -e "{c.workdir(A)}/go-$SLURM_JOB_ID" ] && break; sleep 0.1; done
ls "$SKEIN_SCRATCH" >/dev/null 2>&1 || echo "scratch gone: as expected"
""")
    check(job, f"sbatch refused: {r.stderr}")
    wait_file(os.path.join(c.workdir(A), f"ready-{job}"))
    pids = h.procs_mentioning(c.mount_point(job), "skein-mount")
    check(len(pids) == 1, f"expected one mount process for job {job}, found {pids}")
    os.kill(pids[0], signal.SIGKILL)
    open(os.path.join(c.workdir(A), f"go-{job}"), "w").close()
    state = c.wait_job(job)
    check(state == "COMPLETED", f"job {job} ended {state}")
    check("scratch gone" in c.output(A, job), f"the job still saw its scratch: {c.output(A, job)!r}")
    assert_clean(c, job)


def test_a_job_named_as_another_user_stages_only_its_own_files(c):
    # A job's name is its user's own text. One holding "UserId=<B>(<uid>)" once passed for B in
    # the burst buffer's reading of scontrol: $USER in its staging was B, and the copy (made with
    # the gateway's admin rights) brought B's files into A's scratch.
    export0 = c.skein_env["SKEIN_EXPORTS"].split()[0]
    for user, text in ((A, b"mine\n"), (B, b"someone else's\n")):
        d = os.path.join(export0, "users", user, "named")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f"), "wb") as f:
            f.write(text)
    b_uid = h.pwd.getpwnam(B).pw_uid
    job, r = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein stage_in=/srv0/users/$USER/named:/input
cat "$SKEIN_SCRATCH/input/f"
""", "-J", f"x UserId={B}({b_uid})")
    check(job, f"sbatch refused: {r.stderr}")
    state = c.wait_job(job, seconds=90)
    out = c.output(A, job)
    check(state == "COMPLETED", f"job {job} ended {state} ({c.job(job).get('Reason')}): {out}")
    check("someone else" not in out, f"job {job} of {A}, named as {B}, got {B}'s file: {out!r}")
    check("mine" in out, f"job {job} did not get its own file: {out!r}")
    assert_clean(c, job)


def test_bad_directive_is_refused_at_sbatch(c):
    cases = [
        (f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein width=zero\n", "width=zero"),
        (f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein colour=blue\n", "unknown skein option 'colour=blue'"),
        ("#BB_LUA skein width=2\n", f"needs a line '#BB_LUA pool={h.POOL} capacity=SIZE'"),
        (f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein stage_in=relative:/in\n", "two absolute paths"),
        # Copied with the '$' in the name, every array task into one directory.
        (f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein stage_out=/out:/srv0/users/$USER/$SLURM_ARRAY_TASK_ID\n",
         "$SLURM_ARRAY_TASK_ID is not a variable skein knows"),
        (f"#BB_LUA pool={h.POOL} capacity=1G\n#BB_LUA skein stage_in=/srv0/users/$USERNAME/in:/in\n",
         "$USERNAME is not a variable skein knows"),
    ]
    for directive, message in cases:
        job, r = c.sbatch(A, f"#!/bin/bash\n{directive}echo never\n")
        check(job is None, f"sbatch accepted {directive!r} as job {job}")
        check(message in r.stderr, f"sbatch's error for {directive!r} does not say {message!r}: {r.stderr!r}")
    # Slurm's own rule: capacity= needs pool=.
    job, r = c.sbatch(A, "#!/bin/bash\n#BB_LUA capacity=1G\necho never\n")
    check(job is None, f"sbatch accepted capacity= without pool= as job {job}")
    # --bb on the command line holds the directive text itself.
    job, r = c.sbatch(A, "#!/bin/bash\necho never\n", "--bb", "#BB_LUA skein layout=mirrored")
    check(job is None and "layout=mirrored" in r.stderr, f"--bb with a bad option was not refused: {r.stderr!r}")


def test_gateway_down_at_setup_holds_the_job_and_keeps_the_node(c):
    h.run([h.SKEIN_LOCAL, "stop-gateway", "--state", c.skein_state])
    try:
        job, r = c.sbatch(A, f"#!/bin/bash\n{BB}echo ran\n")
        check(job, f"sbatch refused: {r.stderr}")
        deadline = time.monotonic() + 30
        fields = {}
        while time.monotonic() < deadline:
            fields = c.job(job)
            if "cannot_reach_the_gateway" in fields.get("Reason", ""):
                break
            time.sleep(0.2)
        reason = fields.get("Reason", "")
        check("skein:_cannot_create_the_job's_scratch_namespace:_cannot_reach_the_gateway" in reason,
              f"job {job} is not held with the gateway's reason: {reason}")
        check(fields.get("JobState") == "PENDING" and fields.get("Priority") == "0",
              f"job {job} is not held: {fields.get('JobState')} priority {fields.get('Priority')}")
        node = h.run(["sinfo", "-h", "-n", c.slurm_env["SLURM_LOCAL_NODE"], "-o", "%T"], env=c.env()).stdout.strip()
        check(node in ("idle", "mixed", "allocated"), f"node is {node}, not in service")
        h.run(["scancel", job], env=c.env())
        c.wait_job(job, states=("CANCELLED",))
    finally:
        h.run([h.SKEIN_LOCAL, "start-gateway", "--state", c.skein_state])
    check(not c.output(A, job), f"job {job} ran without its scratch")


def wait_reason(c, job, needle, seconds=30):
    deadline = time.monotonic() + seconds
    fields = {}
    while time.monotonic() < deadline:
        fields = c.job(job)
        if needle in fields.get("Reason", ""):
            return fields
        time.sleep(0.2)
    raise AssertionError(f"job {job}'s reason does not say {needle!r}: {fields.get('Reason')}")


def test_failed_staging_holds_the_job_and_cancel_removes_everything(c):
    # A source that is not there (stage-in fails after setup made the namespace), and a source
    # outside what the user may stage (setup refuses before making anything).
    missing, r1 = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein stage_in=/srv0/users/{A}/not-there:/in
echo ran
""")
    fenced, r2 = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein stage_in=/srv0/users/{B}/in:/in
echo ran
""")
    check(missing and fenced, f"sbatch refused: {r1.stderr} {r2.stderr}")
    f1 = wait_reason(c, missing, f"stage-in_of_/srv0/users/{A}/not-there_failed")
    f2 = wait_reason(c, fenced, f"outside_what_user_{A}_may_stage")
    for job, f in ((missing, f1), (fenced, f2)):
        check(f.get("JobState") == "PENDING" and f.get("Priority") == "0",
              f"job {job} is not held: {f.get('JobState')} priority {f.get('Priority')}")
    check(missing in c.job_namespaces(), f"job {missing}'s namespace is gone while it is held")
    check(fenced not in c.job_namespaces(), f"job {fenced} got a namespace though its staging was refused")
    for job in (missing, fenced):
        h.run(["scancel", job], env=c.env())
    for job in (missing, fenced):
        c.wait_job(job, states=("CANCELLED",))
        assert_clean(c, job)
        check(not c.output(A, job), f"job {job} ran")


def test_failed_stage_out_keeps_the_job_in_stage_out_until_scancel_hurry(c):
    # Slurm 22.05 keeps a job whose data_out failed in STAGE_OUT, with the reason, and runs no
    # teardown: the namespace and its files stay for the user or admin to rescue; the user's
    # `scancel --hurry` then removes them.
    job, r = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein stage_out=/never-written:/srv0/users/{A}/out/$SLURM_JOB_ID
echo kept > "$SKEIN_SCRATCH/precious"
""")
    check(job, f"sbatch refused: {r.stderr}")
    c.wait_job(job, states=("STAGE_OUT", "COMPLETED", "FAILED"))
    deadline = time.monotonic() + 30
    f = {}
    while time.monotonic() < deadline:
        f = c.job(job)
        if "stage-out" in f.get("SystemComment", "") or f"data_out failed for JobId={job}," in c.slurmctld_log():
            break
        time.sleep(0.2)
    print(f"  after the failed stage-out: JobState={f.get('JobState')} Reason={f.get('Reason')} "
          f"SystemComment={f.get('SystemComment')}")
    check(f.get("JobState") == "STAGE_OUT", f"job {job} is {f.get('JobState')}, not STAGE_OUT")
    check("/never-written" in f.get("SystemComment", "") + c.slurmctld_log(),
          f"the failed stage-out is not reported: {f.get('SystemComment')}")
    check(job in c.job_namespaces(), f"job {job}'s namespace was removed though its stage-out failed")
    h.run(["runuser", "-u", A, "--", "scancel", "--hurry", job], env=c.env())
    assert_clean(c, job)

def test_the_reaper_renews_a_namespace_whose_job_outlives_its_lifetime(c):
    # A time limit raised while the job runs: its namespace, made for the old limit, would expire
    # under it. The reaper renews it to the job's new end and a day (and an hour), once.
    c.write_config(reap=False)  # the reaper run by hand only
    c.wait_no_reaper()
    job = None
    try:
        job, r = c.sbatch(A, f"#!/bin/bash\n{BB}#BB_LUA skein lifetime=10m\nsleep 300\n", "--time=5")
        check(job, f"sbatch refused: {r.stderr}")
        c.wait_job(job, states=("RUNNING",))

        def expiry():
            for n in json.loads(c.skeinctl("ns", "list").stdout)["job_namespaces"]:
                if n["job_id"] == job:
                    return n["expires_s"], n["created_s"]
            raise AssertionError(f"no namespace for job {job}")

        before, created = expiry()
        check(abs(before - created - 600) <= 5, f"lifetime=10m gave {before - created} s")
        h.run(["scontrol", "update", f"JobId={job}", "TimeLimit=20"], env=c.env())
        ends = h.run(["squeue", "-h", "-j", job, "-o", "%e"], env=c.env()).stdout.strip()
        end_s = time.mktime(time.strptime(ends, "%Y-%m-%dT%H:%M:%S"))
        reaped = c.reap_by_hand()
        check(reaped.returncode == 0, f"reap failed ({reaped.returncode}): {reaped.stderr}")
        check(f"renewed namespace {job}" in reaped.stderr, f"not renewed: {reaped.stderr}")
        after, _ = expiry()
        wanted = end_s + 86400 + 3600
        check(abs(after - wanted) <= 10, f"renewed to {after}, not the job's end and a day and an hour ({wanted:.0f}): "
              f"{reaped.stderr}")
        again = c.reap_by_hand()
        check("renew" not in again.stderr, f"renewed again at once: {again.stderr}")
        check(expiry()[0] == after, "the second pass moved the expiry")
    finally:
        c.write_config()
        if job:
            h.run(["scancel", job], env=c.env(), check=False)
    c.wait_job(job, states=("CANCELLED",))
    assert_clean(c, job)


def test_reaper_removes_namespaces_whose_job_is_gone_and_keeps_the_rest(c):
    # What a teardown that Slurm killed (or gave up on) leaves behind, made by hand: a namespace of
    # a job Slurm never knew, and one of a job that ended and was torn down. Beside them, what the
    # reaper must keep: another cluster's, one not made by the burst buffer, and a held job's.
    uid, gid = str(h.pwd.getpwnam(A).pw_uid), str(h.pwd.getpwnam(A).pw_gid)

    def make(job_id, *labels):
        c.skeinctl("ns", "create", job_id, "--uid", uid, "--gid", gid, "--quota-bytes", "1G",
                   *[a for label in labels for a in ("--label", label)])

    ended, r = c.sbatch(A, f"#!/bin/bash\n{BB}echo ran\n")
    check(ended, f"sbatch refused: {r.stderr}")
    c.wait_job(ended, states=("COMPLETED",))
    assert_clean(c, ended)
    # Its name and comment would pass for fields of an ended job in `scontrol show job`'s text.
    held, r = c.sbatch(A, f"""#!/bin/bash
#BB_LUA pool={h.POOL} capacity=1G
#BB_LUA skein stage_in=/srv0/users/{A}/not-there:/in
echo ran
""", "--job-name=x JobState=COMPLETED EndTime=2001-01-01T00:00:00",
                       "--comment=x BurstBufferState=complete")
    check(held, f"sbatch refused: {r.stderr}")
    wait_reason(c, held, "stage-in_of_")
    # The dry run first, with the background reaper off (and none still running), so that nothing
    # is gone before it looks.
    c.write_config(reap=False)
    c.wait_no_reaper()
    unknown, foreign, unlabelled = "990001", "990002", "990003"
    make(unknown, f"slurm_job={unknown}")
    make(ended, f"slurm_job={ended}")
    make(foreign, f"slurm_job={foreign}", "slurm_cluster=elsewhere")
    make(unlabelled)
    try:
        time.sleep(h.REAP_GRACE_S)
        dry = c.reap_by_hand("--dry-run")
        check(dry.returncode == 0, f"reap --dry-run failed ({dry.returncode}): {dry.stderr}")
        print("  reap --dry-run: " + dry.stderr.strip().replace("\n", "\n  "))
        check(f"would destroy namespace {unknown}: Slurm no longer knows job {unknown}" in dry.stderr,
              f"the dry run does not name namespace {unknown}: {dry.stderr}")
        check(f"would destroy namespace {ended}: job {ended} ended" in dry.stderr,
              f"the dry run does not name namespace {ended}: {dry.stderr}")
        for kept in (foreign, unlabelled, held):
            check(f"namespace {kept}:" not in dry.stderr, f"the dry run would destroy namespace {kept}")
        check({unknown, ended} <= c.job_namespaces(), "the dry run destroyed something")
        # slurmctld starts the reaper with its pool query, about every 30 s.
        c.write_config()
        deadline = time.monotonic() + 75
        while {unknown, ended} & c.job_namespaces() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = c.job_namespaces()
        check(not ({unknown, ended} & left),
              f"the reaper left {sorted({unknown, ended} & left)}; its log: {c.reaper_log()!r}")
        check({foreign, unlabelled, held} <= left,
              f"the reaper removed {sorted({foreign, unlabelled, held} - left)}; its log: {c.reaper_log()!r}")
        check(f"destroyed namespace {unknown}: Slurm no longer knows job {unknown}" in c.reaper_log(),
              f"the reaper's log does not say why {unknown} went: {c.reaper_log()!r}")
    finally:
        c.write_config()
        for extra in (foreign, unlabelled):
            c.skeinctl("ns", "destroy", extra, check=False)
        h.run(["scancel", held], env=c.env(), check=False)
    c.wait_job(held, states=("CANCELLED",))
    assert_clean(c, held)


def test_gateway_unreachable_at_mount_requeues_the_job_held_and_keeps_the_node(c):
    # The nodes reach the gateway at an address where nothing listens; slurmctld still reaches it.
    c.write_config(node_gateway=f"127.0.0.1:{h.free_port()}")
    try:
        job, r = c.sbatch(A, f"#!/bin/bash\n{BB}echo ran\n")
        check(job, f"sbatch refused: {r.stderr}")
        deadline = time.monotonic() + 30
        f = {}
        while time.monotonic() < deadline:
            f = c.job(job)
            if "gateway unreachable" in f.get("Comment", "") and f.get("JobState") == "PENDING":
                break
            time.sleep(0.2)
        check("unreachable" in f.get("Comment", ""), f"job {job} has no skein comment: {f.get('Comment')}")
        check(f.get("JobState") == "PENDING" and f.get("Priority") == "0",
              f"job {job} is not held: {f.get('JobState')} priority {f.get('Priority')}")
        node = h.run(["sinfo", "-h", "-n", c.slurm_env["SLURM_LOCAL_NODE"], "-o", "%T"], env=c.env()).stdout.strip()
        check(node in ("idle", "mixed", "allocated"), f"node is {node} after the failed mount, not in service")
        check(not c.output(A, job), f"job {job} ran without its scratch: {c.output(A, job)!r}")
    finally:
        c.write_config()
    h.run(["scancel", job], env=c.env())
    c.wait_job(job, states=("CANCELLED",))
    assert_clean(c, job)


def test_a_job_without_skein_runs_when_the_mount_fails_for_another_reason(c):
    # The prolog tries every job's mount (the gateway says whether the job has a namespace). A
    # failure that is not the gateway's absence (here the gateway refusing the node's certificate)
    # drained the node for every job, skein's or not; a job that did not ask for skein runs.
    refusing = os.path.join(c.dir, "refusing-mount")
    with open(refusing, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\necho 'skein-mount: the gateway refused: a job'\"'\"'s mount credential is given "
                "only to a node certificate (node_clients) (PERMISSION_DENIED)' >&2\nexit 1\n")
    os.chmod(refusing, 0o755)
    c.write_config(skein_mount=refusing)
    try:
        job, r = c.sbatch(A, "#!/bin/bash\necho ran without skein\n")
        check(job, f"sbatch refused: {r.stderr}")
        state = c.wait_job(job)
        node = h.run(["sinfo", "-h", "-n", c.slurm_env["SLURM_LOCAL_NODE"], "-o", "%T"], env=c.env()).stdout.strip()
        check(node in ("idle", "mixed", "allocated"), f"node is {node} after the failed mount, not in service")
        check(state == "COMPLETED", f"job {job} ended {state} ({c.job(job).get('Reason')})")
        check("ran without skein" in c.output(A, job), f"job {job} did not run: {c.output(A, job)!r}")
        check(not os.path.exists(os.path.join(c.scratch_root, job)), "a mount point was left for the job")
    finally:
        c.write_config()


def test_prolog_asks_the_gateway_when_slurmctld_cannot_tell(c):
    # The prolog asks slurmctld (scontrol) whether the job asked for skein. When that fails, a
    # prolog that failed too would drain the node for every job, skein's or not; it asks the
    # gateway instead, which made the namespace of every skein job before its allocation. Run as
    # slurmd runs it, for job ids slurmctld never gave, so that the real scontrol fails.
    uid, gid = str(h.pwd.getpwnam(A).pw_uid), str(h.pwd.getpwnam(A).pw_gid)
    absent, present = "990011", "990012"
    c.skeinctl("ns", "create", present, "--uid", uid, "--gid", gid, "--quota-bytes", "1G")

    def hook(name, job_id):
        r = h.run([os.path.join(h.SOURCE, "slurm", name)], check=False, timeout=90,
                  env=c.env(SKEIN_SLURM_CONFIG=c.config_path, SLURM_JOB_ID=job_id,
                            SLURM_JOB_UID=uid, SLURM_JOB_GID=gid))
        print(f"  {name} of job {job_id}: " + r.stderr.strip().replace("\n", "\n  "))
        return r

    mp = os.path.join(c.scratch_root, present)
    try:
        r = hook("prolog", absent)
        check(r.returncode == 0, f"the prolog of a job with no namespace failed: {r.stderr}")
        check("scontrol show job" in r.stderr, f"scontrol did not fail as the test needs: {r.stderr}")
        check(not os.path.exists(os.path.join(c.scratch_root, absent)),
              "a mount point was left for a job with no namespace")
        r = hook("prolog", present)
        check(r.returncode == 0, f"the prolog of a job with a namespace failed: {r.stderr}")
        check(h.mountinfo_has(mp), f"the job's namespace is not mounted on {mp}")
        check(os.stat(mp).st_uid == int(uid), f"{mp} is not the job's user's")
    finally:
        r = hook("epilog", present)
        c.skeinctl("ns", "destroy", present, check=False)
    check(r.returncode == 0, f"the epilog failed: {r.stderr}")
    check(not h.mountinfo_has(mp) and not os.path.exists(mp), f"{mp} was left")


TESTS = [
    test_scratch_is_mounted_private_at_first_line,
    test_two_running_jobs_cannot_see_each_others_scratch,
    test_each_task_of_a_job_array_gets_a_scratch_of_its_own,
    test_stage_in_and_out_byte_for_byte,
    test_a_job_named_as_another_user_stages_only_its_own_files,
    test_mpi_job_bcasts_and_stages_its_scratch_with_srun,
    test_failed_staging_holds_the_job_and_cancel_removes_everything,
    test_failed_stage_out_keeps_the_job_in_stage_out_until_scancel_hurry,
    test_cleanup_after_scancel_of_a_running_job,
    test_bbstat_shows_a_user_their_own_namespaces_and_root_every_one,
    test_cleanup_after_a_failing_job_that_left_a_process_in_scratch,
    test_cleanup_after_the_mount_process_was_killed,
    test_a_mount_root_reached_through_a_symlink_is_cleaned_up,
    test_bad_directive_is_refused_at_sbatch,
    test_a_job_without_skein_runs_when_the_mount_fails_for_another_reason,
    test_gateway_down_at_setup_holds_the_job_and_keeps_the_node,
    test_gateway_unreachable_at_mount_requeues_the_job_held_and_keeps_the_node,
    test_reaper_removes_namespaces_whose_job_is_gone_and_keeps_the_rest,
    test_the_reaper_renews_a_namespace_whose_job_outlives_its_lifetime,
    test_prolog_asks_the_gateway_when_slurmctld_cannot_tell,
]


def main():
    h.install_signal_handlers()
    missing = h.missing_slurm()
    if missing:
        print(f"slurm tests: not installed: {', '.join(missing)} (deploy/install-deps installs slurm-wlm, munge)")
        if os.environ.get("CI") == "true":
            print("0 passed, 1 failed")
            return 1
        return 77
    selected = [t for t in TESTS if not sys.argv[1:] or any(a in t.__name__ for a in sys.argv[1:])]
    passed = failed = 0
    c = h.Cluster()
    try:
        try:
            c.start()
        except Exception as e:  # noqa: BLE001 - a cluster that does not start fails the run
            print(f"FAIL cluster start: {e}")
            print(f"0 passed, {len(selected)} failed")
            return 1
        for t in selected:
            start = time.monotonic()
            try:
                t(c)
                passed += 1
                print(f"PASS {t.__name__} ({time.monotonic() - start:.1f} s)", flush=True)
            except h.Interrupted:
                raise
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL {t.__name__} ({time.monotonic() - start:.1f} s)", flush=True)
                traceback.print_exc(file=sys.stdout)
                sys.stdout.flush()
    except h.Interrupted as e:
        print(f"interrupted ({e}); tearing down")
        failed += 1
    finally:
        c.close()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
