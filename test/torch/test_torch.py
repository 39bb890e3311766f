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
