#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""campaign.py BUILD_DIR [TRIALS]: randomized fault trials; a table per cell; fails on any wrong, hung or lost.

Cells: shrink and rejoin, each over file and in-band membership (the
store ftcc-run serves), each over TCP, libfabric shm and libfabric
tcp;ofi_rxm (a provider libfabric lacks is skipped, and said so), all
with FTCC_SHM=0; shrink over TCP with the ring forced ("tcp-ring":
FTCC_ALGORITHM=ring) and with recursive halving and doubling forced
("tcp-rh": FTCC_ALGORITHM=rh; the other shrink cells run the small
allreduces by recursive doubling, as chosen by size; rejoin always runs
the ring); and
shrink and rejoin over the one-host path ("onehost": FTCC_SHM=1, the
collectives in shared memory, the recovery over TCP). Every
trial runs examples/train_steps (SGD with momentum: a float32 AVG
allreduce every step, a broadcast every 7th, a MAX allreduce every 11th)
on 5 ranks under ftcc-run and SIGKILLs one to three of them from outside:
the first at a random moment from the start (inside ft_init too) to the
job's end, the others a random 0-150 ms later (during the recovery, or
the restarted rank's state transfer under rejoin); in a third of the
trials every rank has forked a worker that outlives it (a data loader's).

Verdicts, against a failure-free run of the same cell:
  wrong  an op at 5 contributors whose digest is not the failure-free
         one (before any op by fewer: after one, a rank grown back in
         runs on the survivors' model), two ranks that printed different
         results for one op, or survivors that end with different models;
  hung   the job did not end within its deadline;
  lost   a rank that was not killed did not finish (excluded, failed);
  exact  every op at 5 contributors (rejoin: the killed ranks came back);
  lossy  some ops by fewer (shrink's result over the survivors; under
         rejoin, its fallback when a killed rank could not come back).
With the nemesis on (the default; CAMPAIGN_NEMESIS=0 turns it off), every
trial also draws one to three of the world's ordinary faults
(scripts/nemesis.py: connection bursts, idle, slow and garbage connections
from another user to every listening port, a killed rank's ports squatted,
the rendezvous and log directories filled, packet loss, a rate-limited
link, a healthy rank stopped for bursts or held to a small CPU share, the
wall clock stepped, the monotonic clock far from zero, a healthy rank's
descriptors exhausted), in a network and mount namespace of the trial's
own; a table per fault follows the table per cell. A rank whose
descriptors were exhausted may leave, but only with an error that says so
(else it is a healthy rank lost). The nemesis needs root; without it the
campaign says so and runs the kills alone.
CAMPAIGN_SEED replays a campaign; each failure prints its command line.
CAMPAIGN_JOBS trials run at once (default 1). CAMPAIGN_MEMBERSHIP=file
(or inband) keeps only that membership's cells; CAMPAIGN_SKIP=policy/membership,...
leaves those cells out; CAMPAIGN_TRANSPORT=onehost,tcp,... keeps only
those transports' cells. Every rank's ft_init waits at
most FTCC_CONNECT_TIMEOUT_MS = 10 s here (a job that cannot start fails
sooner than at the default 30 s; the verdict is the same).
"""
import concurrent.futures
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import nemesis

B = sys.argv[1] if len(sys.argv) > 1 else "build"
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else int(os.environ.get("CAMPAIGN_TRIALS", "1000"))
SEED = int(os.environ.get("CAMPAIGN_SEED", str(int(time.time()))))
N, STEPS, COUNT, PAUSE = 5, 60, 2000, 5
DEADLINE = 90

OP = re.compile(r"^\[(\d+)\.(\d+) [^]]*\] op (\d+) digest ([0-9a-f]+) contributors (\d+)$")
MODEL = re.compile(r"^\[(\d+)\.(\d+) [^]]*\] model ([0-9a-f]+)$")
LEFT_SHM = re.compile(r"shm: (no room for this rank's|cannot make|cannot map)")
EXIT = re.compile(r"^ftcc-run: rank (\d+) \(pid \d+\) (exited with status (\d+)|killed by signal (\d+))")


def provider_ok(prov):
    if prov is None or prov in ("onehost", "tcp-ring", "tcp-rh"):
        return True
    try:
        return subprocess.run(["fi_info", "-p", prov], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


def env_for(policy, membership, prov):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("FTCC_") or k == "FI_PROVIDER":
            del env[k]
    env["FTCC_POLICY"] = policy
    env["FTCC_REJOIN_TIMEOUT_MS"] = "10000"
    env["FTCC_CONNECT_TIMEOUT_MS"] = "10000"
    env["FI_SHM_DISABLE_CMA"] = "1"
    if membership == "inband":
        env["FTCC_MEMBERSHIP"] = "inband"
    # the ring's cells stay on the ring; one cell per path
    env["FTCC_SHM"] = "1" if prov == "onehost" else "0"
    if prov in ("tcp-ring", "tcp-rh"):
        env["FTCC_ALGORITHM"] = prov[4:]
    elif prov is not None and prov != "onehost":
        env["FTCC_TRANSPORT"] = "fabric"
        env["FI_PROVIDER"] = prov
    return env


def run(policy, membership, prov, kills, fork, spec=None):
    args = [f"{B}/ftcc-run", "-n", str(N), "--tag", "--timeout", str(DEADLINE)]
    if policy == "rejoin":
        args += ["--restart", "--max-restarts", "3"]
    else:
        args += ["--ignore-killed"]
    for rank, at in kills:
        args += ["--kill", f"{rank}@{at:.3f}"]
    args += [f"{B}/examples/train_steps", str(STEPS), str(COUNT), str(PAUSE), "-"]
    if fork:
        args.append("fork")
    env = env_for(policy, membership, prov)
    work, cmd, wall = None, args, None
    if spec is not None:
        work = tempfile.mkdtemp(prefix="ftcc-nemesis-")
        cmd = nemesis.command(spec, args, work)
        # the wall clock is the machine's: put it back whatever the trial did
        wall = time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=DEADLINE + 60)
        return p.returncode, p.stdout.decode(errors="replace"), cmd, env
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode(errors="replace"), cmd, env
    finally:
        if spec is not None and "clock" in spec["kinds"]:
            time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_MONOTONIC) + wall)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def parse(out):
    ops, models, status = {}, {}, {}
    for line in out.splitlines():
        m = OP.match(line)
        if m:
            ops.setdefault(int(m.group(3)), set()).add((m.group(4), int(m.group(5)),
                                                         int(m.group(1))))
            continue
        m = MODEL.match(line)
        if m:
            models[int(m.group(1))] = m.group(3)
            continue
        m = EXIT.match(line)
        if m:
            status[int(m.group(1))] = ("exit", int(m.group(3))) if m.group(3) else \
                ("signal", int(m.group(4)))
    return ops, models, status


STARVED = re.compile(r"nemesis: fds-starved rank (\d+)")
# what a rank out of descriptors must say when it leaves
SAYS_FDS = re.compile(r"descriptor|Too many open files|EMFILE", re.I)


def story(out, head=40, tail=60):
    """A failed trial's output for the report: its first and last lines (a
    cause is often at the start, the verdict's symptom at the end)."""
    lines = ["  | " + ln[:300] for ln in out.splitlines() if " digest " not in ln]
    if len(lines) > head + tail:
        lines = lines[:head] + [f"  | ... {len(lines) - head - tail} lines ..."] + lines[-tail:]
    return "\n".join(lines)


def judge(refs, policy, rc, out, victims):
    """refs: the failure-free runs' digests by op; the ops match one of them
    (the one-host cells: a /dev/shm full from the start keeps the job on the
    ring, which adds in another order: the same bits on every rank, other
    bits than the shared-memory run's). Under rejoin, a job in which a rank
    said it could not make or map its segment (the nemesis filled /dev/shm,
    or starved the rank of descriptors) ran that view on the ring and a
    later one, perhaps, in shared memory again: its ops at N contributors
    are then judged by agreement alone, as after a lossy op (seed 20261213
    trial 10: rank 3 out of descriptors at the start, the ring's digest,
    then shared memory once it was restarted)."""
    ops, models, status = parse(out)
    left_shm = policy == "rejoin" and len(refs) > 1 and LEFT_SHM.search(out) is not None
    if rc == 124:
        return "hung", "past its deadline"
    # a rank whose descriptors the nemesis exhausted may leave, saying why
    for m in STARVED.finditer(out):
        r = int(m.group(1))
        st = status.get(r)
        if st is not None and st != ("exit", 0):
            said = [ln for ln in out.splitlines() if re.match(rf"^\[{r}\.\d+ ", ln)]
            if not any(SAYS_FDS.search(ln) for ln in said):
                return "lost", f"rank {r} left out of descriptors without saying so"
            victims = victims | {r}
    # after an op by fewer, the model is not the failure-free run's: the ops
    # at N contributors after it (a killed rank grown back in) are judged by
    # agreement alone
    first_lossy = min((op for op, results in ops.items() if any(c < N for _, c, _ in results)),
                      default=None)
    for op, results in ops.items():
        # every survivor returns the same result; a victim may have held one
        # (its own, returned before it died) that the others computed anew
        lasting = {(d, c) for d, c, r in results if r not in victims}
        if len(lasting) > 1:
            return "wrong", f"op {op}: survivors printed {sorted(lasting)}"

    def differs(ref):
        for op, results in ops.items():
            for digest, contributors, _ in results:
                if contributors == N and ref.get(op) != digest and \
                        (first_lossy is None or op < first_lossy):
                    return f"op {op}: digest {digest} at {N} contributors, want {ref.get(op)}"
        return None
    whys = [differs(ref) for ref in refs]
    if all(whys) and not left_shm:
        return "wrong", whys[0]
    lasting = {r: m for r, m in models.items() if r not in victims or policy == "rejoin"}
    if len(set(lasting.values())) > 1:
        return "wrong", f"models differ: {models}"
    healthy = [r for r in range(N) if r not in victims]
    for r in healthy:
        st = status.get(r)
        if r not in models or (st is not None and st != ("exit", 0)):
            return "lost", f"rank {r} (never killed) did not finish: {st}"
    lossy = any(c < N for results in ops.values() for _, c, _ in results)
    if policy == "rejoin" and not lossy and len(models) != N:
        lossy = True
    return ("lossy" if lossy else "exact"), ""


def main():
    rnd = random.Random(SEED)
    cells = []
    for prov in (None, "tcp-ring", "tcp-rh", "shm", "tcp;ofi_rxm", "onehost"):
        name = "tcp" if prov is None else prov
        if name not in os.environ.get("CAMPAIGN_TRANSPORT", name).split(","):
            continue
        if not provider_ok(prov):
            print(f"campaign: SKIPPED: libfabric provider '{prov}' is not available", flush=True)
            continue
        # (rejoin runs the ring whatever FTCC_ALGORITHM says)
        policies = ["shrink"] if prov in ("tcp-ring", "tcp-rh") else ["shrink", "rejoin"]
        cells += [c for c in [(pol, mb, prov, name) for pol in policies
                              for mb in ("file", "inband")]
                  if os.environ.get("CAMPAIGN_MEMBERSHIP", c[1]) == c[1] and
                  f"{c[0]}/{c[1]}" not in os.environ.get("CAMPAIGN_SKIP", "").split(",")]
    kinds = []
    if os.environ.get("CAMPAIGN_NEMESIS", "1") != "0":
        kinds, why = nemesis.available()
        for line in why:
            print(f"campaign: nemesis: SKIPPED: {line}", flush=True)
    print(f"campaign: seed {SEED} (CAMPAIGN_SEED replays it), {TRIALS} trials over "
          f"{len(cells)} cells, nemesis {' '.join(kinds) if kinds else 'off'}", flush=True)
    refs, span = {}, {}
    for policy, membership, prov, name in cells:
        t0 = time.time()
        rc, out, args, _ = run(policy, membership, prov, [], False)
        ops, models, _ = parse(out)
        if rc != 0 or len(models) != N or any(len({(d, c) for d, c, _ in v}) != 1
                                               for v in ops.values()):
            print(f"campaign: the failure-free run of {policy}/{membership}/{name} failed "
                  f"(status {rc}):\n{out[-3000:]}")
            return 1
        refs[(policy, membership, name)] = [{op: next(iter(v))[0] for op, v in ops.items()}]
        span[(policy, membership, name)] = time.time() - t0
        if prov == "onehost":
            # the ring's run too: the job stays there when /dev/shm is full
            rc, out, args, _ = run(policy, membership, None, [], False)
            ops, models, _ = parse(out)
            if rc != 0 or len(models) != N:
                print(f"campaign: the failure-free ring run of {policy}/{membership} failed "
                      f"(status {rc}):\n{out[-3000:]}")
                return 1
            refs[(policy, membership, name)].append({op: next(iter(v))[0]
                                                     for op, v in ops.items()})
    table = {c[:2] + (c[3],): dict(trials=0, exact=0, lossy=0, wrong=0, hung=0, lost=0)
             for c in cells}
    by_kind = {k: dict(trials=0, exact=0, lossy=0, wrong=0, hung=0, lost=0)
               for k in ["none"] + nemesis.KINDS}
    plans = []
    for t in range(TRIALS):
        policy, membership, prov, name = cells[t % len(cells)]
        key = (policy, membership, name)
        k = rnd.choices([1, 2, 3], weights=[5, 3, 2])[0]
        victims = rnd.sample(range(N), k)
        first = rnd.uniform(0, span[key] * 0.9)
        if rnd.random() < 0.1:
            first = rnd.uniform(0, 0.05)          # inside ft_init
        kills = [(victims[0], first)]
        for v in victims[1:]:
            kills.append((v, kills[-1][1] + rnd.uniform(0, 0.15)))
        fork = rnd.random() < 1 / 3
        spec = None
        if kinds:
            spec = nemesis.draw(rnd, kinds, span[key])
            spec["victims"] = victims
        plans.append((t, cells[t % len(cells)], victims, kills, fork, spec))

    def trial(plan):
        t, (policy, membership, prov, name), victims, kills, fork, spec = plan
        rc, out, args, env = run(policy, membership, prov, kills, fork, spec)
        verdict, why = judge(refs[(policy, membership, name)], policy, rc, out, set(victims))
        return plan, verdict, why, out, args, env

    bad = done = 0
    jobs = int(os.environ.get("CAMPAIGN_JOBS", "1"))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        for plan, verdict, why, out, args, env in pool.map(trial, plans):
            t, (policy, membership, prov, name) = plan[0], plan[1]
            row = table[(policy, membership, name)]
            row["trials"] += 1
            row[verdict] += 1
            spec = plan[5]
            for k in (spec["kinds"] if spec else ["none"]):
                by_kind[k]["trials"] += 1
                by_kind[k][verdict] += 1
            done += 1
            if verdict in ("wrong", "hung", "lost"):
                bad += 1
                envs = " ".join(f"{k}={env[k]}" for k in sorted(env)
                                if k.startswith("FTCC_") or k.startswith("FI_"))
                faults = " ".join(spec["kinds"]) if spec else "none"
                print(f"campaign: trial {t} {policy}/{membership}/{name} (nemesis: {faults}) "
                      f"{verdict}: {why}\n"
                      f"  {envs} {' '.join(args)}\n"
                      f"  nemesis spec: {json.dumps(spec) if spec else 'none'}\n" +
                      story(out), flush=True)
            if done % 50 == 0:
                print(f"campaign: {done} of {TRIALS} trials, {bad} bad", flush=True)
    except KeyboardInterrupt:
        print(f"campaign: interrupted after {done} trials: the table is of those", flush=True)
        pool.shutdown(wait=False, cancel_futures=True)
    print()
    print("| policy | membership | transport | trials | exact | lossy | wrong | hung | "
          "healthy lost |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    tot = dict(trials=0, exact=0, lossy=0, wrong=0, hung=0, lost=0)
    for (policy, membership, name), row in table.items():
        print(f"| {policy} | {membership} | {name} | {row['trials']} | {row['exact']} | "
              f"{row['lossy']} | {row['wrong']} | {row['hung']} | {row['lost']} |")
        for c in tot:
            tot[c] += row[c]
    print(f"| all | | | {tot['trials']} | {tot['exact']} | {tot['lossy']} | {tot['wrong']} | "
          f"{tot['hung']} | {tot['lost']} |")
    if kinds:
        print()
        print("| nemesis | trials | exact | lossy | wrong | hung | healthy lost |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for k, row in by_kind.items():
            if row["trials"]:
                print(f"| {k} | {row['trials']} | {row['exact']} | {row['lossy']} | "
                      f"{row['wrong']} | {row['hung']} | {row['lost']} |")
    print(f"campaign: seed {SEED}: {bad} trials wrong, hung or with a healthy rank lost")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
