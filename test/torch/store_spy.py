# SPDX-License-Identifier: MIT
"""store_spy.py HOST PORT SIZE [squat]: a stranger who reaches a job's TCPStore (test_torch.py).

PyTorch's TCPStore has no authentication: anyone who reaches
MASTER_ADDR:MASTER_PORT reads every key whose name it knows, and the names
ftcc uses are in its source. This reads them as long as the store answers and
prints one line per thing seen:
  saw KEY VALUE        a key of ftcc's, and its value, at the first poll that found it
  last KEY present|absent   at the last poll that the store answered
With "squat", it also binds (SO_REUSEADDR, and SO_REUSEPORT where there is one)
and listens on every membership address it reads, before ftcc's ft_init can,
and keeps what it got until the store goes away:
  squatted ADDR | refused ADDR ERROR
"""
import socket
import sys
import time
from datetime import timedelta

import torch.distributed as dist

host, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
squat = len(sys.argv) > 4 and sys.argv[4] == "squat"
PREFIX = "default_pg/0/"  # init_process_group's PrefixStore, then the first group's
ABSENT = b"\x00store_spy: no key holds this"
keys = ["ftcc/token", "ftcc/job"] + [f"ftcc/peer/{r}" for r in range(size)]

# the store's port first, probed every 10 ms: a TCPStore client that finds it closed
# waits seconds before its next try, and a small job is over by then
deadline = time.monotonic() + 60
while True:
    try:
        socket.create_connection((host, port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            print("spy: no store", flush=True)
            sys.exit(1)
        time.sleep(0.01)
store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5))

seen, last, held, tried = {}, {}, [], set()
while True:
    now = {}
    try:
        # 1.13's Python Store has no check(), and a wait that times out leaves its answer
        # to be read as the next one's: a compare_set that expects what no key holds
        # answers that when the key is absent and the value otherwise, changing nothing
        for k in keys:
            v = store.compare_set(PREFIX + k, ABSENT, ABSENT + b"?")
            now[k] = v != ABSENT
            if now[k] and k not in seen:
                seen[k] = v.decode(errors="replace")
                print(f"saw {k} {seen[k]}", flush=True)
    except Exception:  # the job is over: its store went with rank 0
        break
    last = now
    for k, v in seen.items():
        if not squat or not k.startswith("ftcc/peer/") or v in tried:
            continue
        tried.add(v)
        h, p = v.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            s.bind((h, int(p)))
            s.listen(16)
            held.append(s)
            print(f"squatted {v}", flush=True)
        except OSError as e:
            s.close()
            print(f"refused {v} {e}", flush=True)
    time.sleep(0.001)
for k, there in last.items():
    print(f"last {k} {'present' if there else 'absent'}", flush=True)
