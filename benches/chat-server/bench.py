#!/usr/bin/env python3
"""Serve the same tool-using chat with `agentloop serve` and with Node + the Vercel AI SDK, drive
both with the same load generator, and print server CPU per chat, peak RSS and time to first
byte side by side (see README.md).

Usage: benches/chat-server/bench.py [--agentloop PATH] [--reps N] [--cells 1,64,1000]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TICK = os.sysconf("SC_CLK_TCK")
# Chats per cell: enough for the CPU counters (10 ms ticks) to resolve well under 1 %.
CHATS = {1: 400, 64: 2560, 1000: 5000}


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line; the split drops the first two.
    return (int(fields[11]) + int(fields[12])) / TICK


def peak_rss_mib(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024


def start(cmd, ready, core, env=None):
    """Start `cmd` pinned to `core`; wait for a stdout line matching `ready`, return (proc, match)."""
    proc = subprocess.Popen(
        ["taskset", "-c", str(core), *cmd],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.time() + 30
    lines = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(ready, line)
        if m:
            return proc, m
    proc.kill()
    sys.exit(f"{cmd[0]} did not start:\n{''.join(lines)}")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def load(url, concurrency, chats):
    out = subprocess.run(
        ["taskset", "-c", "1", "node", str(HERE / "load.mjs"), url, str(concurrency), str(chats)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def one(server, concurrency, agentloop):
    """One fresh server process through one cell: warm-up, then the measured chats."""
    mock, m = start([agentloop, "mock-server", "--port", "0"], r"OpenAI-compatible:\s+(\S+)", 1)
    base = m.group(1)
    tools = None
    for line in mock.stdout:
        if line.startswith("demo tool:"):
            tools = line.split()[2]
            break
    work = tempfile.mkdtemp(prefix="agentloop-chat-bench-")
    try:
        if server == "agentloop":
            proc, m = start(
                [agentloop, "serve", "--addr", "127.0.0.1:0", "--model", "openai-compatible/demo",
                 "--base-url", base, "--tools", tools, "--db", f"{work}/chat.db"],
                r"serving on (http://\S+)", 0)
            url = f"{m.group(1)}/v1/chat/ui-stream"
        else:
            proc, m = start(["node", str(HERE / "node_server.mjs"), "0", base], r"listening (\d+)", 0)
            url = f"http://127.0.0.1:{m.group(1)}/api/chat"
        chats = CHATS[concurrency]
        warm = load(url, min(concurrency, 64), max(64, chats // 10))
        before = cpu_seconds(proc.pid)
        measured = load(url, concurrency, chats)
        cpu = cpu_seconds(proc.pid) - before
        rss = peak_rss_mib(proc.pid)
        stop(proc)
        failures = warm["failures"] + measured["failures"]
        if failures:
            print(f"  {server} c={concurrency}: {failures} failed chats: {measured['first_failure'] or warm['first_failure']}",
                  file=sys.stderr)
        return {
            "cpu_ms_per_chat": cpu * 1000 / chats,
            "rss_mib": rss,
            "ttfb_p50_ms": measured["ttfb_p50_ms"],
            "ttfb_p99_ms": measured["ttfb_p99_ms"],
            "failures": failures,
        }
    finally:
        stop(mock)
        shutil.rmtree(work, ignore_errors=True)


def versions():
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    pkgs = {}
    for name in ("ai", "@ai-sdk/openai-compatible"):
        pkg = HERE / "node_modules" / name / "package.json"
        pkgs[name] = json.loads(pkg.read_text())["version"] if pkg.exists() else "missing"
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    return node, pkgs, rev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agentloop", default=str(ROOT / "target/release/agentloop"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cells", default="1,64,1000")
    args = ap.parse_args()
    if not (HERE / "node_modules" / "ai").exists():
        sys.exit("run `npm ci` (or `npm install`) in benches/chat-server first")
    node, pkgs, rev = versions()
    print(f"agentloop {rev} ({args.agentloop}); Node {node}, ai {pkgs['ai']}, "
          f"@ai-sdk/openai-compatible {pkgs['@ai-sdk/openai-compatible']}; "
          f"load averages {os.getloadavg()}; {args.reps} processes per server and cell")
    print()
    print("| concurrent chats | server | CPU ms / chat | peak RSS MiB | TTFB p50 ms | TTFB p99 ms | Node ÷ agentloop CPU | Node ÷ agentloop RSS |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for concurrency in [int(c) for c in args.cells.split(",")]:
        runs = {"agentloop": [], "node": []}
        for rep in range(args.reps):
            order = ["agentloop", "node"] if rep % 2 == 0 else ["node", "agentloop"]
            for server in order:
                runs[server].append(one(server, concurrency, args.agentloop))
        med = {s: {k: median(r[k] for r in rs) for k in rs[0]} for s, rs in runs.items()}
        for s in ("agentloop", "node"):
            m = med[s]
            ratio_cpu = med["node"]["cpu_ms_per_chat"] / med["agentloop"]["cpu_ms_per_chat"]
            ratio_rss = med["node"]["rss_mib"] / med["agentloop"]["rss_mib"]
            extra = f"{ratio_cpu:.1f} | {ratio_rss:.1f}" if s == "node" else " | "
            print(f"| {concurrency} | {s} | {m['cpu_ms_per_chat']:.3f} | {m['rss_mib']:.1f} | "
                  f"{m['ttfb_p50_ms']:.1f} | {m['ttfb_p99_ms']:.1f} | {extra} |", flush=True)


if __name__ == "__main__":
    main()
