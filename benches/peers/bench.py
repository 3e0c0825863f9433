#!/usr/bin/env python3
"""Run the agent-loop benchmark matrix and write benches/RESULTS.md.

For each server write mode (one write per SSE event, whole body in one write) the testkit's
pre-rendered server runs pinned to core 0; every client binary runs pinned to core 1 under GNU
time, for each cell (streaming or not, 1 or 64 runs in flight), REPEATS times, the clients'
order rotating from one repetition to the next so that drifts in machine load spread evenly.
Figures are medians; ratios are to the floor's median in the same cell of the same session.
Then each client runs 10,000 runs with all 10,000 in flight.

With --lto every client is built with whole-program LTO (`lto = "fat"`, `codegen-units = 1`,
set through cargo's environment, so Cargo.toml is untouched) into target/lto instead.

Usage: python3 bench.py [--runs 2000] [--repeats 5] [--clients floor,agentloop,...]
                        [--lto] [--skip-build] [--skip-10k] [--out ../RESULTS.md]
"""

import argparse
import datetime
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.join(HERE, "target", "release")
LTO_TARGET = os.path.join(HERE, "target", "lto")
LTO_ENV = {"CARGO_PROFILE_RELEASE_LTO": "fat", "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "1"}
CLIENTS = ["floor", "agentloop", "rig", "genai", "async-openai"]
MODES = [("event", "one write per SSE event"), ("body", "whole body in one write")]
CELLS = [(stream, conc) for stream in (True, False) for conc in (1, 64)]
TIME = "/usr/bin/time"
TIMEOUT_S = 900


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def build(lto):
    cmd = ["cargo", "build", "--release", "--ignore-rust-version", "--bins"]
    env = dict(os.environ)
    env.pop("CARGO_TARGET_DIR", None)  # the peers keep their own target dir
    if lto:
        env.update(LTO_ENV, CARGO_TARGET_DIR=LTO_TARGET)
    shown = " ".join(f"{k}={v}" for k, v in env.items() if k in LTO_ENV or k == "CARGO_TARGET_DIR")
    print("+", shown, " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=HERE, check=True, env=env)


def ensure_time():
    if os.path.exists(TIME):
        return
    print("GNU time is missing: installing Debian's `time` package", flush=True)
    subprocess.run(["apt-get", "install", "-y", "time"], check=True)


class Server:
    """The pre-rendered server, pinned to core 0."""

    def __init__(self, mode):
        self.proc = subprocess.Popen(
            ["taskset", "-c", "0", os.path.join(BIN, "server"), "--addr", "127.0.0.1:0",
             "--write-mode", mode],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        match = re.match(r"listening on (\S+)", line)
        if not match:
            self.stop()
            sys.exit(f"the server did not start: {line!r}")
        self.base_url = match.group(1)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def run_client(client, base_url, runs, concurrency, stream):
    """One client process under GNU time: (ok, CPU s, wall s, peak RSS KiB, stderr).

    CPU (user + sys) comes from the kernel's rusage of the process tree, read with wait4 in
    microseconds; GNU time's own `%U %S` print only hundredths of a second. Wall time and peak
    RSS are GNU time's `%e` and `%M`.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out, \
            tempfile.TemporaryFile("w+") as err:
        cmd = ["taskset", "-c", "1", TIME, "-f", "%U %S %e %M", "-o", out.name,
               os.path.join(BIN, client), "--base-url", base_url, "--runs", str(runs),
               "--concurrency", str(concurrency)]
        if stream:
            cmd.append("--stream")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        timer = threading.Timer(TIMEOUT_S, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().strip()
        if proc.returncode < 0:
            return False, None, None, None, f"killed after {TIMEOUT_S}s: {stderr}"
        lines = out.read().strip().splitlines()
        if not lines:
            return False, None, None, None, stderr or "GNU time wrote nothing"
        fields = lines[-1].split()
        wall, rss = float(fields[2]), int(fields[3])
        cpu = usage.ru_utime + usage.ru_stime
        return proc.returncode == 0, cpu, wall, rss, stderr


def cell_name(mode, stream, conc):
    return f"{mode} / {'stream' if stream else 'no stream'} / {conc} in flight"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--lto", action="store_true",
                    help="build and run every client with whole-program LTO (target/lto)")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--skip-10k", action="store_true")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "RESULTS.md"))
    args = ap.parse_args()
    clients = args.clients.split(",")
    if clients[0] != "floor":
        sys.exit("the floor must come first: every ratio is to it")

    global BIN
    if args.lto:
        BIN = os.path.join(LTO_TARGET, "release")
    ensure_time()
    if not args.skip_build:
        build(args.lto)
    # 10,000 connections in flight need as many descriptors on each side.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))

    started = datetime.datetime.now(datetime.timezone.utc)
    loads = [("start", load())]
    samples = {}  # (mode, stream, conc, client) -> [(cpu, wall, rss)]
    failures = []
    for mode, _ in MODES:
        server = Server(mode)
        try:
            for stream, conc in CELLS:
                name = cell_name(mode, stream, conc)
                print(f"== {name} (load {load()})", flush=True)
                for rep in range(args.repeats):
                    order = clients[rep % len(clients):] + clients[:rep % len(clients)]
                    for client in order:
                        ok, cpu, wall, rss, err = run_client(
                            client, server.base_url, args.runs, conc, stream)
                        if not ok:
                            failures.append((name, client, err.splitlines()[-1] if err else "?"))
                            print(f"   {client}: FAILED: {err}", flush=True)
                            continue
                        samples.setdefault((mode, stream, conc, client), []).append(
                            (cpu, wall, rss))
                        print(f"   {client}: cpu {cpu:.2f}s wall {wall:.2f}s rss {rss} KiB",
                              flush=True)
                loads.append((name, load()))
        finally:
            server.stop()

    big = {}
    if not args.skip_10k:
        server = Server("event")
        try:
            print(f"== 10,000 in flight (load {load()})", flush=True)
            for client in clients:
                ok, cpu, wall, rss, err = run_client(client, server.base_url, 10000, 10000, True)
                big[client] = (ok, cpu, wall, rss, err)
                print(f"   {client}: ok={ok} cpu {cpu}s wall {wall}s rss {rss} KiB", flush=True)
        finally:
            server.stop()
        loads.append(("10,000 in flight", load()))

    write_results(args, clients, samples, failures, big, loads, started)


def versions():
    lock = open(os.path.join(HERE, "Cargo.lock")).read()
    found = {}
    for name in ["rig-core", "rig-agent", "genai", "async-openai", "reqwest", "hyper", "tokio",
                 "axum", "serde_json"]:
        m = re.search(r'name = "%s"\nversion = "([^"]+)"' % re.escape(name), lock)
        found[name] = m.group(1) if m else "?"
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "../../crates", "."], cwd=HERE,
                           capture_output=True, text=True).stdout.strip()
    return found, rustc, commit + (" (with uncommitted changes)" if dirty else "")


def ratio(value, floor):
    return f"{value / floor:.2f}" if floor else "—"


def med(values):
    return statistics.median(values) if values else None


def write_results(args, clients, samples, failures, big, loads, started):
    found, rustc, commit = versions()
    out = []
    w = out.append
    w("# Agent-loop benchmark: agentloop against rig, genai, async-openai and a floor\n")
    w("Tables generated by `benches/peers/bench.py` (see `benches/peers/README.md`); the "
      "sections after the tables were written by hand from the same session's data.\n")
    w(f"- Date: {started:%Y-%m-%d %H:%M} UTC; agentloop at commit {commit}; {rustc}.")
    if args.lto:
        w("- Build: every client with whole-program LTO (`lto = \"fat\"`, `codegen-units = 1`); "
          "the default tables use cargo's release profile.")
    w(f"- Machine: {os.cpu_count()} cores; server pinned to core 0 (`taskset -c 0`), client to "
      "core 1 (`taskset -c 1`). Other work ran on this machine too: load averages (1, 5, 15 "
      "min) are listed below.")
    w(f"- Each cell: {args.runs} runs per process, {args.repeats} processes per client, the "
      "clients' order rotating between repetitions; figures are medians over those processes. "
      "CPU is user + sys of the client process per 1000 runs (the kernel's rusage, read in "
      "microseconds with wait4; GNU time rounds it to 10 ms); wall is the process's elapsed "
      "time (GNU time `%e`); RSS is its peak resident set (`%M`). `×` is the ratio to the "
      "floor's median in the same cell. Every figure includes process start-up (building the "
      "HTTP client loads the system's root certificates, about 19 M instructions, the same "
      "for every client).")
    w("- Workload per run: prompt → `get_weather` call streamed with its arguments in 8 fragments "
      "→ tool runs → result sent back → 155-word answer in 60 deltas plus a usage chunk.")
    w("- Peer versions: " + ", ".join(f"{k} {v}" for k, v in found.items()) + ".\n")

    for mode, title in MODES:
        w(f"## Server writes: {title}\n")
        for stream, conc in CELLS:
            name = cell_name(mode, stream, conc)
            w(f"### {'Streaming' if stream else 'Not streaming'}, {conc} in flight\n")
            w("| client | CPU ms / 1000 runs | × floor | wall s | × floor | peak RSS MiB | × floor |")
            w("|---|---:|---:|---:|---:|---:|---:|")
            floor = samples.get((mode, stream, conc, "floor"), [])
            fcpu = med([s[0] for s in floor])
            fwall = med([s[1] for s in floor])
            frss = med([s[2] for s in floor])
            for client in clients:
                s = samples.get((mode, stream, conc, client), [])
                if not s:
                    w(f"| {client} | failed | | | | | |")
                    continue
                cpu, wall, rss = (med([x[i] for x in s]) for i in range(3))
                # seconds per `runs` runs -> milliseconds per 1000 runs
                cpu_ms = cpu / args.runs * 1e6
                w(f"| {client} | {cpu_ms:.1f} | {ratio(cpu, fcpu)} | {wall:.2f} | "
                  f"{ratio(wall, fwall)} | {rss / 1024:.1f} | {ratio(rss, frss)} |")
            w("")

    if big:
        w("## 10,000 runs in flight\n")
        w("Streaming, one write per SSE event, 10,000 runs with all 10,000 started at once "
          "(one process per client, not repeated).\n")
        w("| client | result | CPU s | wall s | peak RSS MiB |")
        w("|---|---|---:|---:|---:|")
        for client in clients:
            ok, cpu, wall, rss, err = big[client]
            result = "all 10,000 ok" if ok else "FAILED: " + (err.splitlines()[-1] if err else "?")
            fmt = lambda v, f: f.format(v) if v is not None else "—"
            w(f"| {client} | {result} | {fmt(cpu, '{:.2f}')} | {fmt(wall, '{:.2f}')} | "
              f"{fmt(rss / 1024 if rss else None, '{:.1f}')} |")
        w("")

    if "agentloop" in clients:
        w("## Targets (agentloop)\n")
        w("| cell | CPU × floor | target | met | RSS ≤ async-openai's | met |")
        w("|---|---:|---:|---|---|---|")
        for mode, _ in MODES:
            limit = 1.2 if mode == "event" else 1.6
            for stream, conc in CELLS:
                key = (mode, stream, conc)
                a = samples.get(key + ("agentloop",), [])
                f = samples.get(key + ("floor",), [])
                o = samples.get(key + ("async-openai",), [])
                if not a or not f:
                    w(f"| {cell_name(*key)} | — | ≤ {limit} | no data | | |")
                    continue
                r = med([x[0] for x in a]) / med([x[0] for x in f])
                rss_a = med([x[2] for x in a])
                rss_o = med([x[2] for x in o]) if o else None
                rss_txt = f"{rss_a / 1024:.1f} vs {rss_o / 1024:.1f} MiB" if rss_o else "—"
                rss_ok = "yes" if rss_o and rss_a <= rss_o else "no"
                w(f"| {cell_name(*key)} | {r:.2f} | ≤ {limit} | {'yes' if r <= limit else 'no'} | "
                  f"{rss_txt} | {rss_ok} |")
        w("")

    if failures:
        w("## Failures\n")
        for name, client, err in failures:
            w(f"- {name}: {client}: {err}")
        w("")

    w("## Machine load during the session\n")
    w("| after | load average (1, 5, 15 min) |")
    w("|---|---|")
    for when, value in loads:
        w(f"| {when} | {value} |")
    w("")

    with open(args.out, "w") as f:
        f.write("\n".join(out))
    print(f"wrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
