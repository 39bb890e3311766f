# SPDX-License-Identifier: MIT
"""test_torch.py: the ftcc torch.distributed backend, multi-process jobs under deadlines (pytest).

Each test starts SIZE processes of worker.py (Debian's /usr/bin/python3,
PYTHONPATH pointing at the built package), rendezvous through a FileStore
of the test's own (or rank 0's TCPStore, which a stranger reads:
store_spy.py), and fails on any rank's failure or on the deadline.
"""
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("FTCC_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
DEADLINE = 120


def token():
    """The job's token, given out of band as a user must (docs/pytorch.md)."""
    return os.urandom(16).hex()


def clean_env():
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_"):
            del env[k]
    env["PYTHONPATH"] = os.path.abspath(os.path.join(BUILD, "python"))
    return env


def start(what, size, extra_env=None, deadline=DEADLINE, url=None):
    """SIZE workers of what on a FileStore of their own (or at url, tcp://: rank 0's TCPStore):
    (procs, outputs, the store file's bytes)."""
    env = clean_env()
    env["FTCC_TOKEN"] = token()
    env.update(extra_env or {})
    env = {k: v for k, v in env.items() if v is not None}
    with tempfile.TemporaryDirectory() as tmp:
        store = url or os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), what, str(r),
                                   str(size), store], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for r in range(size)]
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=deadline)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail(f"{what} at {size} ranks: past the {deadline} s deadline")
            outs.append(out.decode(errors="replace"))
        kept = b""
        if os.path.exists(store):
            with open(store, "rb") as f:
                kept = f.read()
        return procs, outs, kept


def job(what, size, extra_env=None):
    procs, outs, _ = start(what, size, extra_env)
    # a failure shows every rank's output (a rank waiting for another
    # says little of why that one never came)
    every = "".join(f"\n--- rank {r} (status {p.returncode}):\n{out}"
                    for r, (p, out) in enumerate(zip(procs, outs)))
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"{what} at {size} ranks: rank {r} failed:{every}"
        assert f"rank {r}: {what} ok" in out, every
    return outs


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_every_op_and_dtype(size):
    job("ops", size)


def test_async_ops_in_flight():
    job("async", 3)


def test_mismatched_counts_raise_on_every_rank():
    outs = job("mismatch", 3)
    assert all("mismatch raised" in o for o in outs)


def test_other_devices_dtypes_and_ops_refused():
    job("refused", 2)


def test_destroy_and_init_again():
    job("reinit", 2)


def test_dataloader_workers_forked_after_init():
    job("loader", 2)


def test_the_groups_timeout_bounds_an_op():
    outs = job("timeout", 2)
    assert "timed out after" in outs[0], outs[0]


@pytest.mark.parametrize("size", [2, 3])
def test_ddp_trains_as_one_process(size):
    job("ddp", size)


def ddp_run(policy, victim=None, after_step=0, delay_s=0.0, steps=60, size=4):
    """DDP under ftcc-run (test/torch/ddp_job.py); SIGKILLs the victim delay_s after it printed
    after_step (mid-step: forward, backward with its buckets' allreduces in flight, or the
    optimizer); under rejoin ftcc-run restarts it. Returns ({rank: model digest}, output)."""
    import re
    import signal
    import threading
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_"):
            del env[k]
    env.update(PYTHONPATH=os.path.abspath(os.path.join(BUILD, "python")), FTCC_POLICY=policy)
    cmd = [os.path.join(BUILD, "ftcc-run"), "-n", str(size), "--tag", "--timeout", str(DEADLINE)]
    cmd += ["--restart", "--max-restarts", "1"] if policy == "rejoin" else ["--ignore-killed"]
    cmd += [sys.executable, os.path.join(HERE, "ddp_job.py"), str(steps)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timer = threading.Timer(DEADLINE + 30, p.kill)
    timer.start()
    lines, pid, killed = [], None, False
    for raw in p.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        lines.append(line)
        if victim is None or killed:
            continue
        m = re.match(rf"^\[{victim}\.0 [^]]*\] pid (\d+)$", line)
        if m:
            pid = int(m.group(1))
        if pid and re.match(rf"^\[{victim}\.0 [^]]*\] step {after_step} ", line):
            threading.Timer(delay_s, os.kill, (pid, signal.SIGKILL)).start()
            killed = True
    p.wait()
    timer.cancel()
    out = "\n".join(lines)
    assert "timeout after" not in out, out[-3000:]
    models = {int(m.group(1)): m.group(2) for m in
              re.finditer(r"^\[(\d+)\.\d+ [^]]*\] model ([0-9a-f]+)$", out, re.M)}
    return models, out


@pytest.mark.parametrize("trial", range(3))
def test_ddp_shrink_survivors_finish_with_one_model(trial):
    import random
    rnd = random.Random(trial * 7919 + os.getpid())
    victim, size, steps = rnd.randrange(4), 4, 60
    models, out = ddp_run("shrink", victim, rnd.randrange(2, 40), rnd.uniform(0, 0.02), steps)
    survivors = [r for r in range(size) if r != victim]
    assert sorted(models) == survivors, f"models from {sorted(models)}:\n{out[-3000:]}"
    assert len(set(models.values())) == 1, f"survivors' models differ: {models}"
    last = [ln for ln in out.splitlines()
            if ln.startswith(f"[{survivors[0]}.0 ") and f"] step {steps - 1} " in ln]
    assert last and f"contributors {size - 1}" in last[0], last


_free = {}


def test_ddp_rejoin_is_bit_identical_to_a_run_without_failure():
    """A rank SIGKILLed at random moments of random steps and restarted by ftcc-run --restart:
    it takes the state back (TrainState), the interrupted allreduce completes exactly, and every
    rank, the restarted one included, ends with the failure-free run's model and optimizer
    state, bit for bit (a digest of every parameter and momentum buffer)."""
    import random
    free, out = ddp_run("rejoin")
    assert len(free) == 4 and len(set(free.values())) == 1, out[-3000:]
    want = next(iter(free.values()))
    rnd = random.Random(os.getpid())
    for trial in range(3):
        victim, step = rnd.randrange(4), rnd.randrange(3, 40)
        models, out = ddp_run("rejoin", victim, step, rnd.uniform(0, 0.02))
        assert f"[{victim}.1 " in out, f"rank {victim} was not restarted:\n{out[-3000:]}"
        assert sorted(models) == [0, 1, 2, 3], f"models from {sorted(models)}:\n{out[-3000:]}"
        assert set(models.values()) == {want}, \
            f"trial {trial}: kill {victim} after step {step}: {models}, want {want}\n{out[-2000:]}"


def launched(cmd, size):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_"):
            del env[k]
    env.update(PYTHONPATH=os.path.abspath(os.path.join(BUILD, "python")), FTCC_TOKEN=token(),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=DEADLINE)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, out[-3000:]
    for r in range(size):
        assert f"rank {r} of {size} ok" in out, out[-3000:]


def test_no_token_in_the_store():
    """PyTorch's stores are not authenticated: the job's token is never put there, and the
    keys ftcc put there (the job id, the peer list) are deleted once every rank is in. Rank 0
    once put a token of its own making in the clear (key ftcc/token), kept for the job's life:
    anyone who read it passed every handshake and made a healthy rank leave."""
    tok = token()
    procs, outs, kept = start("ops", 2, {"FTCC_TOKEN": tok})
    assert all(p.returncode == 0 for p in procs), outs
    assert b"ftcc/token" not in kept, "a token key was put in the store"
    assert tok.encode() not in kept, "the job's token is in the store"


def spied(size, squat=False, tok=None):
    """An ops job of SIZE ranks on rank 0's TCPStore, which store_spy.py (a stranger who only
    reaches MASTER_ADDR:MASTER_PORT) reads from the start, squatting on the membership
    addresses it reads if squat: (every rank's status and output, the spy's lines). The last
    rank makes its group 3 s late, as a slow rank would: the others have published their
    keys and wait for it, and the spy has time to read them."""
    import socket
    tok = tok or token()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, os.path.join(HERE, "store_spy.py"), "127.0.0.1", str(port), str(size)]
    spy = subprocess.Popen(cmd + (["squat"] if squat else []), env=clean_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        procs, outs, _ = start("ops", size, {"WORKER_LATE": f"{size - 1}:3", "FTCC_TOKEN": tok},
                               deadline=60, url=f"tcp://127.0.0.1:{port}")
        seen, _ = spy.communicate(timeout=30)
    finally:
        spy.kill()
        spy.wait()
    seen = seen.decode(errors="replace")
    every = "".join(f"\n--- rank {r} (status {p.returncode}):\n{out[-1500:]}"
                    for r, (p, out) in enumerate(zip(procs, outs)))
    return [p.returncode for p in procs], every, seen


def test_a_store_reader_learns_no_token():
    """A stranger reading the TCPStore during and after init (torchrun's, env:// and tcp://
    init) finds no token key, no value that is the token, and none of ftcc's keys once the
    job is up. The token was there in the clear (ftcc/token) for the job's life: whoever read
    it passed every handshake and could make a healthy rank leave with one NOTICE."""
    tok = token()
    status, every, seen = spied(2, tok=tok)
    assert status == [0, 0], every + "\n--- spy:\n" + seen
    assert "saw ftcc/peer/0" in seen, "the spy read nothing: no test\n" + seen
    assert "saw ftcc/token" not in seen, "a token is in the store:\n" + seen
    assert tok not in seen, "the job's token is in the store:\n" + seen
    for k in ["ftcc/token", "ftcc/job", "ftcc/peer/0", "ftcc/peer/1"]:
        assert f"last {k} absent" in seen, f"{k} kept in the store:\n{seen}"


def test_a_squatter_on_a_published_port_does_not_stop_the_job():
    """A stranger who reads a rank's membership address from the store and binds and listens
    there (SO_REUSEADDR, SO_REUSEPORT) before that rank's ft_init: the port is held, listening,
    from before it is published until ft_init's listener takes the same socket over, so the
    bind is refused and the job runs. The port was held bound with SO_REUSEADDR and not
    listening: the squatter got it, that rank failed with FT_EBUSY (its port taken)
    and the others waited out their connect timeout."""
    status, every, seen = spied(3, squat=True)
    assert "squatted" not in seen, "a stranger took a rank's port:\n" + seen + every
    assert status == [0, 0, 0], every + "\n--- spy:\n" + seen
    assert "refused 127.0.0.1:" in seen, "the spy tried no port: no test\n" + seen


def test_no_token_no_start():
    """Without FTCC_TOKEN (and without FTCC_AUTH=none) the group does not start, and every
    rank says why at once; FTCC_AUTH=none runs unauthenticated."""
    procs, outs, _ = start("ops", 2, {"FTCC_TOKEN": None}, deadline=30)
    for p, out in zip(procs, outs):
        assert p.returncode != 0, out
        assert "FTCC_TOKEN" in out, out
    job("ops", 2, {"FTCC_TOKEN": None, "FTCC_AUTH": "none"})


def test_under_torchrun():
    """torchrun's env:// rendezvous (its TCPStore) carries ftcc's peer list and token.
    --redirects 2 --tee 1: Debian's torchrun (1.13 on Python 3.11) fails on its defaults "0"
    (Std.from_str finds no flag worth 0 when 3.11 iterates an IntFlag)."""
    launched([sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc_per_node", "3", "--redirects", "2", "--tee", "1",
              os.path.join(HERE, "launcher_job.py")], 3)


def test_under_mpirun():
    """Open MPI's mpirun: PyTorch's rank from its variables, a FileStore."""
    import shutil
    if shutil.which("mpirun.openmpi") is None:
        pytest.skip("SKIPPED: Open MPI's mpirun is not installed (make deps)")
    with tempfile.TemporaryDirectory() as tmp:
        launched(["mpirun.openmpi", "--oversubscribe", "-np", "3", sys.executable,
                  os.path.join(HERE, "launcher_job.py"), os.path.join(tmp, "store")], 3)
