"""test_torch.py: the ftcc torch.distributed backend, multi-process jobs under deadlines (pytest).

Each test starts SIZE processes of worker.py (Debian's /usr/bin/python3,
PYTHONPATH pointing at the built package), rendezvous through a FileStore
of the test's own, and fails on any rank's failure or on the deadline.
"""
import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("FTCC_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
DEADLINE = 120


def job(what, size, extra_env=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_"):
            del env[k]
    env["PYTHONPATH"] = os.path.abspath(os.path.join(BUILD, "python"))
    env.update(extra_env or {})
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), what, str(r),
                                   str(size), store], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for r in range(size)]
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail(f"{what} at {size} ranks: past the {DEADLINE} s deadline")
            outs.append(out.decode(errors="replace"))
        for r, (p, out) in enumerate(zip(procs, outs)):
            assert p.returncode == 0, f"{what} at {size} ranks: rank {r} failed:\n{out}"
            assert f"rank {r}: {what} ok" in out, out
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


def ddp_with_a_kill(policy, victim, after_step, delay_s, steps=60, size=4):
    """DDP under ftcc-run; SIGKILLs the victim delay_s after it printed after_step (mid-step:
    forward, backward with its buckets' allreduces in flight, or the optimizer)."""
    import random
    import re
    import signal
    import threading
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_"):
            del env[k]
    env.update(PYTHONPATH=os.path.abspath(os.path.join(BUILD, "python")), FTCC_POLICY=policy)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [os.path.join(BUILD, "ftcc-run"), "-n", str(size), "--tag", "--timeout",
               str(DEADLINE), "--ignore-killed", sys.executable,
               os.path.join(HERE, "ddp_job.py"), str(steps), os.path.join(tmp, "store")]
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        timer = threading.Timer(DEADLINE + 30, p.kill)
        timer.start()
        lines, pid = [], None
        for raw in p.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            m = re.match(rf"^\[{victim}\.0 [^]]*\] pid (\d+)$", line)
            if m:
                pid = int(m.group(1))
            if pid and re.match(rf"^\[{victim}\.0 [^]]*\] step {after_step} ", line):
                threading.Timer(delay_s, os.kill, (pid, signal.SIGKILL)).start()
        p.wait()
        timer.cancel()
    out = "\n".join(lines)
    assert p.poll() is not None and not out.endswith("timed out"), out[-3000:]
    models = {int(m.group(1)): m.group(2) for m in
              re.finditer(r"^\[(\d+)\.0 [^]]*\] model ([0-9a-f]+)$", out, re.M)}
    survivors = [r for r in range(size) if r != victim]
    assert sorted(models) == survivors, f"models from {sorted(models)}:\n{out[-3000:]}"
    assert len(set(models.values())) == 1, f"survivors' models differ: {models}"
    last = [ln for ln in lines if re.match(rf"^\[{survivors[0]}\.0 [^]]*\] step {steps - 1} ", ln)]
    assert last and f"contributors {size - 1}" in last[0], last
    return out


@pytest.mark.parametrize("trial", range(3))
def test_ddp_shrink_survivors_finish_with_one_model(trial):
    import random
    rnd = random.Random(trial * 7919 + os.getpid())
    ddp_with_a_kill("shrink", victim=rnd.randrange(4), after_step=rnd.randrange(2, 40),
                    delay_s=rnd.uniform(0, 0.02))
