"""Detection latency of linkguardd: fault command -> the event visible in shared memory.

    python -m bench.detect_latency [--cuts 200] [--hold-down-ms 0] [--json results.json]

A throw-away 1-host x 2-rail lab; linkguardd runs inside host a watching rail0 and rail1 with
a short hold-down and flap damping off (--flap-penalty 0), so one cut/restore cycle takes a few
milliseconds. Each cycle: `lab.cut("a", 0)` (its CLOCK_MONOTONIC stamp is taken just before the
netlink request that downs the switch port), wait for rail0's DOWN event, `lab.restore`, wait
for UP. The moment an event becomes visible is stamped by plugin/build/lg_shm_waitevent, a C
reader busy-polling the ring head (the plugin's own hot-path load) in a separate process pinned
to one CPU. CLOCK_MONOTONIC is system-wide (namespaces do not change it), so all stamps compare.

Each DOWN splits into (all from the same clock):
  kernel -> monitor   fact_ns - cut       netlink request, link-watch work, notification, the
                                          daemon's wake-up and recv()
  monitor -> policy   time_ns - fact_ns   decoding the message, up to the policy's decision
  policy -> visible   seen_ns - time_ns   policy, table + event publish, the reader noticing
  total               seen_ns - cut
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import netns as pr_netns

from linkguard_lab.lab import Lab, unique_prefix
from linkguardd.shm.reader import ShmReader, ShmUnavailable

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "plugin"
LINKGUARDD = Path(sys.executable).parent / "linkguardd"
WAIT_S = 5.0  # bound on any single wait; an event takes well under a millisecond here
INJECTORS = ("lab.cut", "raw")
NLMSGHDR = struct.Struct("=IHHII")  # struct nlmsghdr
IFINFO = struct.Struct("=BxHiII")  # struct ifinfomsg
# uapi linux/netlink.h, linux/rtnetlink.h, linux/if.h
NLMSG_ERROR, RTM_NEWLINK = 2, 16
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
IFF_UP = 0x1


def c_tool(name: str) -> Path:
    """plugin/build/<name>, (re)built with the plugin's Makefile when missing or older than
    its source (`make build` normally did it already)."""
    path, source = PLUGIN_DIR / "build" / name, PLUGIN_DIR / "tools" / f"{name}.c"
    if not path.exists() or path.stat().st_mtime < source.stat().st_mtime:
        subprocess.run(["make", "-s", "-C", str(PLUGIN_DIR), f"build/{name}"], check=True,
                       capture_output=True, timeout=300)
    return path


@dataclass
class BenchDaemon:
    """linkguardd in one lab host, with its own shm file, socket and (empty) config."""

    lab: Lab
    host: str
    args: list[str]
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    shm_path: Path = field(init=False)
    command: tuple[str, ...] = (str(LINKGUARDD),)  # another build: bench/hostile_local.py
    env: dict[str, str] = field(default_factory=dict)  # added to the clean environment

    def __post_init__(self) -> None:
        self.shm_path = Path("/dev/shm") / f"{self.lab.prefix}-{self.host}"

    def start(self, timeout_s: float = 20.0) -> BenchDaemon:
        config = self.workdir / "linkguard.toml"
        config.write_text("")  # never the machine's /etc/linkguard/linkguard.toml
        argv = [*self.command, "--config", str(config), "--shm-path", str(self.shm_path),
                "--grpc-socket", str(self.workdir / "linkguard.sock"),
                "--grpc-ro-socket", str(self.workdir / "linkguard-ro.sock"),
                "--plugin-verdict-socket", str(self.workdir / "linkguard-verdict.sock"),
                "--state-dir", str(self.workdir / "state"), *self.args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LINKGUARD")}
        env.update(self.env)
        with (self.workdir / "stdout.log").open("wb") as out, \
                (self.workdir / "stderr.log").open("wb") as err:
            self.proc = self.lab.popen(self.host, argv, stdout=out, stderr=err,
                                       stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + timeout_s
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"linkguardd not ready after {timeout_s:g} s: {self.stderr()}")
            time.sleep(0.01)
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"linkguardd exited with {self.proc.returncode}: {self.stderr()}")
        if not (self.workdir / "linkguard.sock").exists():
            return False  # the API starts after the first publish; ready means all of it
        try:
            with ShmReader(self.shm_path) as r:
                nics = r.snapshot()[1]
                return (r.alive() and r.header().daemon_pid == self.proc.pid and bool(nics)
                        and all(n.state != 0 for n in nics))
        except ShmUnavailable:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr(self) -> str:
        path = self.workdir / "stderr.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM by PID; raises unless the exit is clean (status 0, shm file removed)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise RuntimeError("linkguardd ignored SIGTERM") from None
        finally:
            self.proc = None
        if rc != 0 or self.shm_path.exists() or (self.workdir / "linkguard.sock").exists():
            with contextlib.suppress(FileNotFoundError):
                self.shm_path.unlink()
            raise RuntimeError(f"linkguardd unclean exit (status {rc}): {self.stderr()}")


class Waiter:
    """lg_shm_waitevent as a child process; yields its JSON lines with a bounded wait."""

    def __init__(self, shm_path: Path, cpu: int | None) -> None:
        argv = [str(c_tool("lg_shm_waitevent")), "--path", str(shm_path),
                "--idle-timeout-ms", "60000"]
        if cpu is not None:
            argv += ["--cpu", str(cpu)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._fd, selectors.EVENT_READ)
        self._buf = b""
        ready = self.next_line(WAIT_S)
        if not ready.get("ready"):
            raise RuntimeError(f"lg_shm_waitevent: {ready}")

    def next_line(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                raise TimeoutError(f"no event from lg_shm_waitevent within {timeout_s:g} s")
            chunk = os.read(self._fd, 65536)
            if not chunk:
                raise RuntimeError(f"lg_shm_waitevent exited ({self.proc.wait()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        out: dict[str, Any] = json.loads(line)
        return out

    def wait_event(self, nic: str, new_state: str, timeout_s: float = WAIT_S) -> dict[str, Any]:
        """The next event of `nic` into `new_state` (others in between are skipped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            ev = self.next_line(max(0.0, deadline - time.monotonic()))
            if ev.get("gone"):
                raise RuntimeError("the daemon went away")
            if ev.get("name") == nic and ev.get("new_state") == new_state:
                return ev

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # our own child, by PID
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._sel.close()
        if self.proc.stdout:
            self.proc.stdout.close()


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p99 of 200 samples is the 198th smallest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(values_ns: list[int]) -> dict[str, float]:
    us = [v / 1000 for v in values_ns]
    return {"n": len(us), "p50_us": percentile(us, 50), "p99_us": percentile(us, 99),
            "max_us": max(us), "min_us": min(us)}


def machine() -> dict[str, Any]:
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}


class RawFault:
    """Switch-port down/up as one prebuilt RTM_NEWLINK request on an open rtnetlink socket in
    the switch namespace: the stamp is taken right before send(2). lab.cut() stamps before
    pyroute2 encodes its request in Python, which on this machine is hundreds of microseconds
    before the kernel sees it; this injector shows how much of "kernel -> monitor" that is."""

    def __init__(self, lab: Lab, host: str, rail: int) -> None:
        ns = lab.topo.switch_ns
        index = lab.nl.index(ns, lab.topo.port(host, rail))
        # A NETLINK_ROUTE socket opened inside the switch namespace (pyroute2 does the setns in
        # a helper; flags=0: never create a namespace).
        self.sock = pr_netns.create_socket(ns, socket.AF_NETLINK, socket.SOCK_RAW,
                                           socket.NETLINK_ROUTE, flags=0)
        self.sock.bind((0, 0))
        self.sock.settimeout(WAIT_S)
        self._down, self._up = self._request(index, 0), self._request(index, IFF_UP)
        self.request_ns: list[int] = []  # stamp -> the kernel's ACK (the request's own cost)

    @staticmethod
    def _request(index: int, flags: int) -> bytes:
        # struct nlmsghdr + struct ifinfomsg (uapi linux/rtnetlink.h): change only IFF_UP.
        body = IFINFO.pack(socket.AF_UNSPEC, 0, index, flags, IFF_UP)
        return NLMSGHDR.pack(NLMSGHDR.size + len(body), RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK,
                             1, 0) + body

    def _send(self, msg: bytes) -> int:
        t_ns = time.monotonic_ns()
        self.sock.send(msg)
        ack = self.sock.recv(4096)
        self.request_ns.append(time.monotonic_ns() - t_ns)
        _len, mtype, _flags, _seq, _pid = NLMSGHDR.unpack_from(ack)
        error = struct.unpack_from("=i", ack, NLMSGHDR.size)[0] if mtype == NLMSG_ERROR else -1
        if error != 0:
            raise RuntimeError(f"RTM_NEWLINK refused: type {mtype}, error {error}")
        return t_ns

    def cut(self) -> int:
        return self._send(self._down)

    def restore(self) -> int:
        return self._send(self._up)

    def close(self) -> None:
        self.sock.close()


PARTS = ("total", "kernel_to_monitor", "monitor_to_policy", "policy_to_visible",
         "table_visible")


def run(cuts: int = 200, hold_down_ms: int = 0, warmup: int = 10,
        waiter_cpu: int | None = None) -> dict[str, Any]:
    """`cuts` cycles with each injector (lab.cut and raw), interleaved so that both see the
    same machine at the same time."""
    if waiter_cpu is None:
        waiter_cpu = (os.cpu_count() or 1) - 1  # the daemon and the kernel keep the others
    samples: dict[str, dict[str, list[int]]] = {
        inj: {part: [] for part in PARTS} for inj in INJECTORS}
    restore_total: list[int] = []
    with tempfile.TemporaryDirectory(prefix="lgbench-") as tmp, \
            Lab(unique_prefix("lgb"), hosts=1, rails=2).up() as lab:
        daemon = BenchDaemon(lab, "a", ["--interfaces", "rail0,rail1", "--hold-down-ms",
                                        str(hold_down_ms), "--flap-penalty", "0",
                                        "--metrics-address", ""], Path(tmp))
        waiter, raw = None, RawFault(lab, "a", 0)
        faults = {"lab.cut": (lambda: lab.cut("a", 0), lambda: lab.restore("a", 0)),
                  "raw": (raw.cut, raw.restore)}
        try:
            daemon.start()
            waiter = Waiter(daemon.shm_path, waiter_cpu)
            for i in range(warmup + len(INJECTORS) * cuts):
                injector = INJECTORS[i % len(INJECTORS)]
                cut, restore = faults[injector]
                # De-correlate the cuts from the daemon's periodic work (heartbeat every 50 ms,
                # statistics every 1 s), so the samples see it as often as a real fault would.
                time.sleep(random.uniform(0.002, 0.02))
                t_cut = cut()
                down = waiter.wait_event("rail0", "DOWN")
                t_restore = restore()
                up = waiter.wait_event("rail0", "UP", WAIT_S + hold_down_ms / 1000)
                if i < warmup:
                    continue  # first cycles pay for lazy imports and cold caches
                if down["reason"] != "CARRIER_LOST":
                    raise RuntimeError(f"unexpected DOWN reason: {down}")
                part = samples[injector]
                part["total"].append(down["seen_ns"] - t_cut)
                part["kernel_to_monitor"].append(down["fact_ns"] - t_cut)
                part["monitor_to_policy"].append(down["time_ns"] - down["fact_ns"])
                part["policy_to_visible"].append(down["seen_ns"] - down["time_ns"])
                if down["table_seen_ns"]:
                    part["table_visible"].append(down["table_seen_ns"] - t_cut)
                if hold_down_ms == 0:  # restore -> UP has no intended delay only without it
                    restore_total.append(up["seen_ns"] - t_restore)
        finally:
            if waiter is not None:
                waiter.close()
            raw.close()
            daemon.stop()
    results: dict[str, Any] = {
        "machine": machine(), "cuts": cuts, "warmup": warmup, "hold_down_ms": hold_down_ms,
        "waiter_cpu": waiter_cpu,
        "down": {inj: {k: summary(v) for k, v in parts.items() if v}
                 for inj, parts in samples.items()},
        "raw_request": summary(raw.request_ns[warmup:]),
        "samples_ns": samples,
    }
    if restore_total:
        results["restore_to_up"] = summary(restore_total)
    return results


def report(results: dict[str, Any]) -> str:
    lines = []
    for injector, parts in results["down"].items():
        lines.append(f"{'DOWN, fault by ' + injector:<26} {'p50 us':>9} {'p99 us':>9} "
                     f"{'max us':>9}")
        for name, s in parts.items():
            lines.append(f"  {name:<24} {s['p50_us']:>9.1f} {s['p99_us']:>9.1f} "
                         f"{s['max_us']:>9.1f}")
    extra = [("raw request (to ACK)", results["raw_request"])]
    if "restore_to_up" in results:
        extra.append(("restore -> UP (both)", results["restore_to_up"]))
    for name, s in extra:
        lines.append(f"  {name:<24} {s['p50_us']:>9.1f} {s['p99_us']:>9.1f} {s['max_us']:>9.1f}")
    m = results["machine"]
    lines.append(f"{results['cuts']} cuts per injector after {results['warmup']} warm-up; "
                 f"machine: {m['cpus']} CPUs, kernel {m['kernel']}, Python {m['python']}, "
                 f"{m['date']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cuts", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--hold-down-ms", type=int, default=0)
    parser.add_argument("--waiter-cpu", type=int, default=None,
                        help="CPU for the busy-polling reader [default: the last one]")
    parser.add_argument("--json", help="also write the results (with every sample) here")
    args = parser.parse_args(argv)
    if not 1 <= args.cuts <= 100_000:
        parser.error("--cuts must be 1..100000")
    results = run(args.cuts, args.hold_down_ms, args.warmup, args.waiter_cpu)
    print(report(results))
    for injector, parts in results["down"].items():
        met = parts["total"]["p99_us"] <= 1000
        print(f"goal p99 <= 1 ms (fault by {injector}): {'met' if met else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
