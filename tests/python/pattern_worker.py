"""One worker of a mixed job in tests/dpdk.rs, through the Python package:
it all-reduces `inagg agent --len N --verify`'s int32 pattern, checks the
sum exactly, and writes the result where the Rust agents write theirs.

Usage: pattern_worker.py CONFIG LEN OUTPUT, CONFIG a JSON object of
inagg.Worker's keyword arguments. Prints "result verified" on success.
"""

import array
import json
import sys

import inagg


def pattern(w, n):
    """src/cmd/agent.rs's pattern_i32: ((i mod 1000) - 500) * (w + 1)."""
    return array.array("i", (((i % 1000) - 500) * (w + 1) for i in range(n)))


def main():
    options, n, output = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with inagg.Worker(**options) as w:
        me, workers = w.info["worker"], w.workers
        data = pattern(me, n)
        stats = w.allreduce(data)
        backend = w.info["backend"]
    want = [sum(((i % 1000) - 500) * (r + 1) for r in range(workers)) for i in range(n)]
    with open(output, "wb") as f:
        f.write(data.tobytes())
    ok = list(data) == want
    print("python worker %d of %d on %s: %d packets, %d retransmissions, %s"
          % (me, workers, backend, stats.packets_sent, stats.retransmissions,
             "result verified" if ok else "RESULT WRONG"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
