#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""nemesis.py: the world's ordinary faults for the campaign (scripts/campaign.py).

A trial with the nemesis on runs its job inside a network and mount
namespace of its own (and, when drawn, a time namespace), where this file,
as root, sets up and drives the faults it drew, while ftcc-run kills ranks
as before:

  burst    another user (nobody) opens 100-300 connections at a time to
           every port the job listens on, and closes them at once
  idle     the same, holding them open for seconds
  slow     a byte every 100 ms on a few connections to every port
  garbage  random bytes and resets on every port
  squat    another user binds and listens on every port the job let go
           (a killed rank's), and answers whoever connects with garbage
  fill     another user fills the job's rendezvous and log directories (a
           small tmpfs of the trial's own) until ENOSPC, blocks and inodes;
           on the one-host path (FTCC_SHM=1) /dev/shm too (the trial's
           own), so that the next view's segments find no room
  loss     a share of the TCP packets on the loopback dropped (nftables)
  rate     the loopback limited in rate (tc tbf): queueing delay
  stop     SIGSTOP/SIGCONT bursts on a healthy rank, each well under the
           detect timeout
  cpu      a healthy rank held to a small CPU share (a cgroup's quota)
  clock    the wall clock stepped (forward or back) and put back
  mono     the job's monotonic clock far from zero (a time namespace)
  fds      a healthy rank's descriptor limit lowered to what it holds: it
           may leave, but only saying why (descriptors), never taken for
           a peer's death; the others go on

Delay and reordering need netem, which this kernel may not have: then they
are not drawn, and the campaign says so once.

As a module: draw(rnd) a trial's faults, command(...) the job's command
line wrapped for them, available() what this machine can do. As a
program: `nemesis.py inner SPEC -- COMMAND...` (inside the namespaces, as
root) and `nemesis.py attack PORTS MODES...` (the other user's attacker).
"""
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

KINDS = ["burst", "idle", "slow", "garbage", "squat", "fill", "loss", "rate", "stop", "cpu",
         "clock", "mono", "fds"]
NOBODY = 65534
HERE = os.path.dirname(os.path.abspath(__file__))
STOP_MAX_S = 0.35   # a stop burst: well under FTCC_DETECT_TIMEOUT_MS (1 s)


def _ok(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def available():
    """The kinds this machine can draw, and a line for each it cannot."""
    if os.geteuid() != 0:
        return [], ["not root: no namespaces, so no nemesis"]
    if not _ok(["unshare", "-n", "-m", "true"]):
        return [], ["unshare -n -m fails: no namespaces, so no nemesis"]
    kinds, why = [], []
    for k in KINDS:
        if k == "loss" and not _ok(["unshare", "-n", "sh", "-c",
                                    "ip link set lo up && nft add table inet t"]):
            why.append("loss: nftables unavailable (make deps installs nftables)")
            continue
        if k == "rate" and not _ok(["unshare", "-n", "sh", "-c", "ip link set lo up && tc qdisc "
                                    "add dev lo root tbf rate 100mbit burst 64k latency 50ms"]):
            why.append("rate: tc tbf unavailable")
            continue
        if k == "mono" and not _ok(["unshare", "--time", "--monotonic", "1000", "true"]):
            why.append("mono: no time namespaces in this kernel")
            continue
        if k == "cpu" and not os.path.isfile("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") and \
                not os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):
            why.append("cpu: no cgroup cpu controller")
            continue
        kinds.append(k)
    if not _ok(["unshare", "-n", "sh", "-c", "ip link set lo up && tc qdisc add dev lo root "
                "netem delay 1ms"]):
        why.append("delay and reordering: this kernel has no netem (sch_netem)")
    return kinds, why


def draw(rnd, kinds, span):
    """One trial's faults: one to three kinds, with their parameters."""
    spec = {"kinds": sorted(rnd.sample(kinds, rnd.choice([1, 1, 2, 2, 3]))), "span": span}
    spec["seed"] = rnd.randrange(1 << 30)
    spec["start"] = rnd.choice([0.0, rnd.uniform(0, span * 0.8)])
    if "loss" in spec["kinds"]:
        spec["loss_pct"] = rnd.choice([1, 2])
    if "rate" in spec["kinds"]:
        spec["rate_mbit"] = rnd.choice([20, 100, 400])
    if "clock" in spec["kinds"]:
        spec["clock_step_s"] = rnd.choice([-1, 1]) * rnd.uniform(2, 300)
    if "mono" in spec["kinds"]:
        # past 2^31 ms and past 2^32 ms: a 32-bit millisecond clock wraps
        spec["mono_s"] = rnd.choice([2200000, 4400000, 90 * 86400])
    return spec


def command(spec, args, workdir):
    """args (an ftcc-run command line) run under spec's faults."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    pre = ["unshare", "-n", "-m", "--propagation", "private"]
    if "mono" in spec["kinds"]:
        pre += ["--time", "--fork", "--monotonic", str(spec["mono_s"]),
                "--boottime", str(spec["mono_s"])]
    return pre + ["/usr/bin/python3", os.path.join(HERE, "nemesis.py"), "inner", path, "--"] + args


# ---- inside the trial's namespaces (root) -------------------------------------

def line(text):
    """One line in one write: ftcc-run writes to the same pipe, and two
    writes of a line (its text, then its newline) let its lines in between."""
    os.write(1, (text + "\n").encode())


def say(t0, what):
    line(f"nemesis: +{time.monotonic() - t0:.3f} {what}")


def job_pids(root):
    """Every process under root (ftcc-run): {pid: rank or None}."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            rank = None
            try:
                with open(f"/proc/{c}/environ", "rb") as f:
                    for kv in f.read().split(b"\0"):
                        if kv.startswith(b"FTCC_RANK="):
                            rank = int(kv[10:])
            except (OSError, ValueError):
                pass
            out[c] = rank
            todo.append(c)
    return out


def ranks_of(root):
    """{rank: pid} of the ranks themselves (not the workers they fork)."""
    pids = job_pids(root)
    ranks = {}
    for pid, rank in pids.items():
        if rank is None:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        if pids.get(ppid) is None:      # its parent is ftcc-run, not another rank
            ranks[rank] = pid
    return ranks


PORT = re.compile(r":(\d+)\s+\S+\s+users:\(\(\"[^\"]*\",pid=(\d+),")


def listening_ports(root):
    try:
        out = subprocess.run(["ss", "-Hltnp"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=5).stdout.decode()
    except (OSError, subprocess.TimeoutExpired):
        return set()
    pids = set(job_pids(root)) | {root}
    return {int(m.group(1)) for m in PORT.finditer(out) if int(m.group(2)) in pids}


def write_ports(path, ports):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(" ".join(str(p) for p in sorted(ports)))
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def as_nobody(cmd):
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] + cmd


def inner(spec_path, args):
    with open(spec_path) as f:
        spec = json.load(f)
    kinds, rnd = spec["kinds"], random.Random(spec["seed"])
    work = os.path.dirname(spec_path)
    t0 = time.monotonic()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    env = dict(os.environ)
    fs = os.path.join(work, "fs")
    os.makedirs(fs, exist_ok=True)
    # the trial's directories on a tmpfs of its own, gone with its mount namespace
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,nr_inodes=4096,mode=0755", "tmpfs",
                    fs], check=True)
    for d in ("rdv", "log"):
        os.makedirs(os.path.join(fs, d), mode=0o700)
    # and a /dev/shm of its own (libfabric's shm regions, the one-host
    # path's segments): nothing a trial leaves there outlives it
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,mode=1777", "tmpfs", "/dev/shm"],
                   check=True)
    open_space = os.path.join(fs, "public")
    os.makedirs(open_space)
    os.chmod(open_space, 0o1777)
    env["FTCC_RENDEZVOUS"] = os.path.join(fs, "rdv")
    env["FTCC_LOG_DIR"] = os.path.join(fs, "log")
    say(t0, f"faults {' '.join(kinds)} from +{spec['start']:.2f} s "
        f"{json.dumps({k: v for k, v in spec.items() if k not in ('kinds', 'span', 'seed')})}")
    job = subprocess.Popen(args, env=env)
    stop = threading.Event()
    threads, procs = [], []
    clock = {"offset": None}

    def wait_start():
        return not stop.wait(spec["start"])

    def ports_feed():
        path = os.path.join(work, "ports")
        seen = set()
        write_ports(path, seen)
        while not stop.is_set():
            now = listening_ports(job.pid)
            seen |= now
            write_ports(path, now)
            write_ports(path + ".seen", seen)
            stop.wait(0.02)

    def attacker():
        modes = [k for k in kinds if k in ("burst", "idle", "slow", "garbage", "squat")]
        if not modes or not wait_start():
            return
        say(t0, f"attacker (uid {NOBODY}): {' '.join(modes)}")
        procs.append(subprocess.Popen(as_nobody(["/usr/bin/python3", os.path.abspath(__file__),
                                                 "attack", os.path.join(work, "ports"),
                                                 str(spec["seed"])] + modes)))

    def filler():
        if not wait_start():
            return
        say(t0, "filling the rendezvous and log tmpfs")
        procs.append(subprocess.Popen(as_nobody(["/usr/bin/python3", os.path.abspath(__file__),
                                                 "fill", open_space])))
        if env.get("FTCC_SHM") == "1":
            say(t0, "filling /dev/shm")
            procs.append(subprocess.Popen(as_nobody(["/usr/bin/python3",
                                                     os.path.abspath(__file__), "fill",
                                                     "/dev/shm"])))

    def network():
        if not wait_start():
            return
        if "loss" in kinds:
            pct = spec["loss_pct"]
            subprocess.run(["nft", "add table inet nemesis"], check=True)
            subprocess.run(["nft", "add chain inet nemesis in { type filter hook input "
                            "priority 0; }"], check=True)
            subprocess.run(["nft", f"add rule inet nemesis in meta l4proto tcp numgen random "
                            f"mod 100 < {pct} drop"], check=True)
            say(t0, f"dropping {pct}% of TCP packets")
        if "rate" in kinds:
            subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate",
                            f"{spec['rate_mbit']}mbit", "burst", "64k", "latency", "100ms"],
                           check=True)
            say(t0, f"loopback limited to {spec['rate_mbit']} Mbit/s")

    def healthy_rank():
        """A rank no --kill names (so the campaign counts it healthy)."""
        victims = set(spec.get("victims", []))
        ranks = ranks_of(job.pid)
        choice = sorted(r for r in ranks if r not in victims)
        return (choice[rnd.randrange(len(choice))], ranks) if choice else (None, ranks)

    def stopper():
        if not wait_start():
            return
        while not stop.is_set():
            r, ranks = healthy_rank()
            if r is not None:
                s = rnd.uniform(0.05, STOP_MAX_S)
                try:
                    os.kill(ranks[r], signal.SIGSTOP)
                    stop.wait(s)
                finally:
                    try:
                        os.kill(ranks[r], signal.SIGCONT)
                    except OSError:
                        pass
                say(t0, f"rank {r} stopped {s * 1000:.0f} ms")
            stop.wait(rnd.uniform(0.3, 1.5))

    def starver():
        if not wait_start():
            return
        base = "/sys/fs/cgroup/cpu"
        if not os.path.isfile(os.path.join(base, "cpu.cfs_quota_us")):
            say(t0, "cpu: no cgroup v1 cpu controller: not starved")
            return
        cg = os.path.join(base, f"ftcc-nemesis-{os.getpid()}")
        os.makedirs(cg, exist_ok=True)
        try:
            with open(os.path.join(cg, "cpu.cfs_period_us"), "w") as f:
                f.write("100000")
            share = rnd.choice([5000, 10000, 20000])
            with open(os.path.join(cg, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(share))
            while not stop.is_set():
                r, ranks = healthy_rank()
                if r is not None:
                    try:
                        for tid in os.listdir(f"/proc/{ranks[r]}/task"):
                            with open(os.path.join(cg, "tasks"), "w") as f:
                                f.write(tid)
                        say(t0, f"rank {r} held to {share // 1000}% of a CPU")
                    except OSError:
                        pass
                stop.wait(rnd.uniform(1, 4))
                # back to the machine's own group, then another rank
                with open(os.path.join(cg, "tasks")) as f:
                    tids = f.read().split()
                for tid in tids:
                    try:
                        with open(os.path.join(base, "tasks"), "w") as f:
                            f.write(tid)
                    except OSError:
                        pass
        finally:
            try:
                with open(os.path.join(cg, "tasks")) as f:
                    for tid in f.read().split():
                        try:
                            with open(os.path.join(base, "tasks"), "w") as g:
                                g.write(tid)
                        except OSError:
                            pass
                os.rmdir(cg)
            except OSError:
                pass

    def clocker():
        if not wait_start():
            return
        clock["offset"] = time.clock_gettime(time.CLOCK_REALTIME) - \
            time.clock_gettime(time.CLOCK_MONOTONIC)
        step = spec["clock_step_s"]
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + step)
        say(t0, f"wall clock stepped {step:+.1f} s")
        stop.wait(rnd.uniform(0.5, 5))
        time.clock_settime(time.CLOCK_REALTIME,
                           time.clock_gettime(time.CLOCK_MONOTONIC) + clock["offset"])
        clock["offset"] = None
        say(t0, "wall clock put back")

    def fd_limiter():
        if not wait_start():
            return
        r, ranks = healthy_rank()
        if r is None:
            return
        pid = ranks[r]
        try:
            held = len(os.listdir(f"/proc/{pid}/fd"))
            old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (held + 2, old[1]))
        except (OSError, ValueError):
            return
        line(f"nemesis: fds-starved rank {r}")
        say(t0, f"rank {r}'s descriptors limited to {held + 2} (it holds {held})")
        stop.wait(rnd.uniform(1, 6))
        try:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
            say(t0, f"rank {r}'s descriptor limit put back")
        except (OSError, ValueError):
            pass

    agents = [ports_feed, attacker]
    for k, fn in (("fill", filler), ("stop", stopper), ("cpu", starver), ("clock", clocker),
                  ("fds", fd_limiter)):
        if k in kinds:
            agents.append(fn)
    if "loss" in kinds or "rate" in kinds:
        agents.append(network)
    for fn in agents:
        th = threading.Thread(target=fn, daemon=True)
        th.start()
        threads.append(th)
    try:
        rc = job.wait()
    finally:
        stop.set()
        if clock["offset"] is not None:
            time.clock_settime(time.CLOCK_REALTIME,
                               time.clock_gettime(time.CLOCK_MONOTONIC) + clock["offset"])
        for p in procs:
            p.kill()
            p.wait()
        for th in threads:
            th.join(timeout=10)
        subprocess.run(["umount", "-l", fs], stderr=subprocess.DEVNULL)
    return rc


# ---- the other user's programs ------------------------------------------------

def attack(ports_path, seed, modes):
    """Connections of a user with no token to every port of the job, forever."""
    rnd = random.Random(seed)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    held, slow, squats, seen = [], [], {}, set()
    while os.getppid() != 1:
        try:
            with open(ports_path) as f:
                ports = {int(p) for p in f.read().split()}
            with open(ports_path + ".seen") as f:
                seen = {int(p) for p in f.read().split()}
        except (OSError, ValueError):
            ports = set()
        for port in ports:
            mode = rnd.choice(modes)
            if mode in ("burst", "idle"):
                n = rnd.randrange(100, 300)
                for _ in range(n):
                    s = socket.socket()
                    s.setblocking(False)
                    try:
                        s.connect_ex(("127.0.0.1", port))
                    except OSError:
                        s.close()
                        continue
                    if mode == "idle":
                        held.append(s)
                    else:
                        s.close()
            elif mode == "slow" and len(slow) < 16:
                s = socket.socket()
                s.settimeout(0.05)
                try:
                    s.connect(("127.0.0.1", port))
                    slow.append(s)
                except OSError:
                    s.close()
            elif mode == "garbage":
                s = socket.socket()
                s.settimeout(0.05)
                try:
                    s.connect(("127.0.0.1", port))
                    s.send(os.urandom(rnd.randrange(1, 4096)))
                    if rnd.random() < 0.5:   # a reset, not a close
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                except OSError:
                    pass
                s.close()
        if "squat" in modes:
            for port in seen - ports - set(squats):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("0.0.0.0", port))
                    s.listen(64)
                    s.setblocking(False)
                    squats[port] = s
                except OSError:
                    s.close()
            for s in squats.values():
                try:
                    c, _ = s.accept()
                    c.setblocking(False)
                    c.send(os.urandom(rnd.randrange(1, 512)))
                    held.append(c)
                except OSError:
                    pass
        for s in slow[:]:
            try:
                s.send(b"\0")
            except OSError:
                s.close()
                slow.remove(s)
        while len(held) > 4000 or (held and rnd.random() < 0.05):
            held.pop(0).close()
        time.sleep(rnd.uniform(0.05, 0.4))


def fill(path):
    """Fills path's file system: blocks, then inodes; holds it full."""
    n = 0
    try:
        with open(os.path.join(path, "filler"), "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:
        pass
    while True:
        try:
            open(os.path.join(path, f"i{n}"), "wb").close()
            n += 1
        except OSError:
            break
    while os.getppid() != 1:
        time.sleep(0.5)


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "inner" and sys.argv[3] == "--":
        sys.exit(inner(sys.argv[2], sys.argv[4:]))
    if len(sys.argv) > 3 and sys.argv[1] == "attack":
        attack(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "fill":
        fill(sys.argv[2])
        return
    print(__doc__, file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main()
