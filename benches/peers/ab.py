#!/usr/bin/env python3
"""A/B one cell of the matrix: client binaries side by side against one server.

For comparing builds of the same client (say agentloop at two commits) on changes worth a few
percent, which the full matrix's run-to-run spread hides: one server (pinned to core 0) serves
every process; the binaries (pinned to core 1) alternate, REPEATS processes each, and each
binary's median CPU (user + sys) per run is printed with its ratio to the first binary's.

Usage: python3 ab.py MODE STREAM CONCURRENCY RUNS REPEATS NAME=BINARY [NAME=BINARY ...]
  e.g. python3 ab.py event 1 1 5000 11 floor=target/release/floor \\
           before=/tmp/agentloop-before after=target/release/agentloop
MODE is the server's write mode (event or body); STREAM is 1 or 0.
"""

import os
import statistics
import sys

from bench import Server


def cpu_seconds(args):
    """Run one client process; its CPU (user + sys) in seconds. Exits on any failure."""
    pid = os.fork()
    if pid == 0:
        os.execvp(args[0], args)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(args)} failed")
    return usage.ru_utime + usage.ru_stime


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    mode, stream, concurrency, runs, repeats = sys.argv[1:6]
    clients = [arg.split("=", 1) for arg in sys.argv[6:]]
    runs, repeats = int(runs), int(repeats)
    server = Server(mode)
    cpu = {name: [] for name, _ in clients}
    try:
        for _ in range(repeats):
            for name, binary in clients:
                args = ["taskset", "-c", "1", binary, "--base-url", server.base_url,
                        "--runs", str(runs), "--concurrency", concurrency]
                if stream == "1":
                    args.append("--stream")
                cpu[name].append(cpu_seconds(args))
    finally:
        server.stop()
    base = statistics.median(cpu[clients[0][0]])
    for name, _ in clients:
        median = statistics.median(cpu[name])
        print(f"{mode} stream={stream} in-flight={concurrency} {name:>14}: "
              f"{median / runs * 1e6:8.1f} us/run  x{median / base:.3f}")


if __name__ == "__main__":
    main()
