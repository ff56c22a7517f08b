"""Lab baseline: TCP throughput of one rail between two lab hosts, measured with iperf3.

This is the physical limit of the lab's veth + bridge path; the plugin's transport is later
measured against it in the same run (import measure_iperf and call it on the same lab).

    python -m bench.lab_iperf [--seconds 5] [--rail 0] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Any

from linkguard_lab.lab import Lab, unique_prefix

DEFAULT_PORT = 5201


def _wait_listening(lab: Lab, host: str, port: int, server: subprocess.Popen,
                    timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"iperf3 server in {host} exited with {server.returncode}")
        out = lab.run(host, ["ss", "-Hltn", f"sport = :{port}"]).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"iperf3 server in {host} not listening after {timeout_s:g} s")


def iperf_json(lab: Lab, src: str, dst: str, rail: int, streams: int = 1,
               seconds: float = 5.0, port: int = DEFAULT_PORT) -> dict[str, Any]:
    """Run one iperf3 test src -> dst over `rail` (both ends bound to their rail address)
    and return iperf3's JSON report."""
    server = lab.popen(dst, ["iperf3", "-s", "-1", "-B", lab.address(dst, rail),
                             "-p", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(lab, dst, port, server)
        proc = lab.run(src, ["iperf3", "-c", lab.address(dst, rail), "-B", lab.address(src, rail),
                             "-p", str(port), "-P", str(streams), "-t", f"{seconds:g}", "-J"],
                       timeout=seconds + 30)
        report = json.loads(proc.stdout or "{}")
        if proc.returncode != 0 or "error" in report:
            raise RuntimeError(f"iperf3 client failed: {report.get('error', proc.stderr)}")
        return report
    finally:
        try:
            server.wait(timeout=5)  # -1: the server exits after one test
        except subprocess.TimeoutExpired:
            server.kill()  # by PID, only the server we started
            server.wait()


def gbit_s(report: dict[str, Any]) -> float:
    return report["end"]["sum_received"]["bits_per_second"] / 1e9


def measure_iperf(lab: Lab, src: str = "a", dst: str = "b", rail: int = 0, streams: int = 1,
                  seconds: float = 5.0, port: int = DEFAULT_PORT) -> float:
    """Received TCP throughput src -> dst over `rail`, in Gbit/s."""
    return gbit_s(iperf_json(lab, src, dst, rail, streams, seconds, port))


def machine() -> dict[str, Any]:
    version = subprocess.run(["iperf3", "--version"], check=False, capture_output=True,
                             text=True)
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "iperf3": (version.stdout.splitlines() or ["?"])[0],
            "date": time.strftime("%Y-%m-%d")}


def run(seconds: float = 5.0, rail: int = 0, streams: tuple[int, ...] = (1, 4)
        ) -> dict[str, Any]:
    """Bring up a throw-away 2x2 lab, measure a -> b on `rail` for each stream count."""
    if not shutil.which("iperf3"):
        raise SystemExit("iperf3 not found (apt-get install iperf3)")
    results: dict[str, Any] = {"machine": machine(), "rail": rail, "seconds": seconds,
                               "gbit_s": {}, "retransmits": {}, "cpu_percent": {}}
    with Lab(unique_prefix("lgb")).up() as lab:
        for n in streams:
            report = iperf_json(lab, "a", "b", rail, streams=n, seconds=seconds)
            gbps, cpu = gbit_s(report), report["end"].get("cpu_utilization_percent", {})
            results["gbit_s"][n] = gbps
            results["retransmits"][n] = report["end"]["sum_sent"].get("retransmits")
            results["cpu_percent"][n] = {"sender": cpu.get("host_total"),
                                         "receiver": cpu.get("remote_total")}
            print(f"iperf3 a -> b rail{rail}, {n} stream(s), {seconds:g} s: {gbps:.2f} Gbit/s "
                  f"(retransmits {results['retransmits'][n]}, CPU sender "
                  f"{cpu.get('host_total', 0):.0f}% receiver {cpu.get('remote_total', 0):.0f}%)",
                  flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rail", type=int, default=0)
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    results = run(args.seconds, args.rail, tuple(args.streams))
    m = results["machine"]
    print(f"machine: {m['cpus']} CPUs, kernel {m['kernel']}, {m['iperf3']}, {m['date']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
