"""`linkguard-lab demo`: a cable cut under NCCL-like traffic, and its repair, on one time line.

A throw-away 2-host x 2-rail lab; linkguardd in each host (its own shared-memory file); the
NCCL-like driver (plugin/build/lg_nccl_driver) moving verified traffic both ways between a and b
through libnccl-net-linkguard.so on device 0 (primary rail0, standing backup path on rail1).
Then a's rail0 is cut at the switch, held down for a few seconds, and restored. The demo prints
what happens as it happens, and at the end one timeline relative to the cut:

  fault injected -> the daemon's monitor saw it (shm event fact_ns) -> the daemon published
  DOWN (time_ns) -> the plugin switched (its INFO line, NCCL_DEBUG=INFO, NET) -> traffic gap
  (the driver's largest gap between completions around the cut) -> restore -> the daemon's UP
  after its hold-down -> the plugin's reintegration -> totals (bytes verified, messages lost,
  duplicated, reordered, corrupted).

Whatever the plugin does is reported as it is: a connection that fails, or traffic that stalls
until the link is back, is shown as such. The lab (daemons, drivers, namespaces) is always torn
down, also on Ctrl-C or an error. `run_demo()` returns a summary dict (tests/lab/test_demo.py).

HostDaemon (one linkguardd in a lab host) is shared with bench/failover_gap.py and bench/soak.py.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from linkguard_lab.errors import LabError
from linkguard_lab.lab import Lab, unique_prefix
from linkguard_lab.netns import require_root
from linkguard_lab.timeline import (
    Gap,
    PluginLine,
    ShmEvent,
    Timeline,
    first_event,
    fmt_ms,
    human_bytes,
    largest_gap,
    parse_plugin_line,
    parse_progress,
    report_gaps,
    switch_window,
)

REPO = Path(__file__).resolve().parents[2]
PLUGIN_BUILD = REPO / "plugin" / "build"
SHM_DUMP = PLUGIN_BUILD / "lg_shm_dump"
BIN = Path(sys.executable).parent  # the venv's console scripts
PAIRS = "rail0:rail1,rail1:rail0"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def _tool(name: str) -> str:
    path = BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


# --- one linkguardd in a lab host ------------------------------------------------------------

class HostDaemon:
    """linkguardd in one lab host with its own shm file (/dev/shm/<prefix>-<host>), API socket
    and empty config file (so /etc/linkguard never leaks in), /metrics off. Started with
    lab.popen (`ip netns exec` execs, so the PID is the daemon's); stopped by that PID."""

    def __init__(self, lab: Lab, host: str, args: list[str] | None = None) -> None:
        self.lab, self.host = lab, host
        self.shm_path = Path("/dev/shm") / f"{lab.prefix}-{host}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"lgd-{lab.prefix}-{host}-", dir="/tmp"))
        self.grpc_socket = self.workdir / "api.sock"
        self.config = self.workdir / "linkguard.toml"
        self.config.write_text("")
        self.argv = [_tool("linkguardd"), "--config", str(self.config),
                     "--shm-path", str(self.shm_path), "--grpc-socket", str(self.grpc_socket),
                     "--grpc-ro-socket", str(self.workdir / "api-ro.sock"),
                     "--plugin-verdict-socket", str(self.workdir / "verdict.sock"),
                     "--state-dir", str(self.workdir / "state"), "--metrics-address", "", "--interfaces", "rail0,rail1", "--pairs", PAIRS,
                     *(args or [])]
        self.proc: subprocess.Popen[bytes] | None = None
        self.cursor = 0  # events read so far (seq)

    def start(self) -> HostDaemon:
        # The prefix is unique to this lab: a file there is a leftover of a killed run of it.
        with contextlib.suppress(FileNotFoundError):
            self.shm_path.unlink()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LINKGUARD")}
        with (self.workdir / "stdout.log").open("wb") as out, \
                (self.workdir / "stderr.log").open("wb") as err:
            self.proc = self.lab.popen(self.host, self.argv, stdout=out, stderr=err,
                                       stdin=subprocess.DEVNULL, env=env)
        return self

    def dump(self, events_since: int | None = None) -> dict[str, Any] | None:
        """lg_shm_dump --json: what the plugin's C reader sees (None: no daemon yet)."""
        argv = [str(SHM_DUMP), "--path", str(self.shm_path), "--json"]
        if events_since is not None:
            argv += ["--events-since", str(events_since)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except OSError:
            return None  # the tool being rebuilt this instant: the next poll reads it
        if proc.returncode != 0:
            return None
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            raise LabError(f"linkguardd in host {self.host} exited during start: "
                           f"{self.stderr()[-2000:]}")
        if not self.shm_path.exists() or not self.grpc_socket.exists():
            return False
        d = self.dump()
        return bool(d and d["daemon_pid"] == self.proc.pid and d["nics"]
                    and all(n["state"] != "UNKNOWN" for n in d["nics"]))

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if time.monotonic() > deadline:
                raise LabError(f"linkguardd in host {self.host} not ready after {timeout_s:g} s")
            time.sleep(0.05)
        d = self.dump()
        self.cursor = int(d["ring_head"]) if d else 0

    def states(self) -> dict[str, str]:
        d = self.dump()
        return {n["name"]: n["state"] for n in d["nics"]} if d else {}

    def new_events(self) -> list[ShmEvent]:
        """Events published since the last call (the ring holds hundreds: poll often enough)."""
        d = self.dump(self.cursor)
        if not d:
            return []
        self.cursor = int(d.get("events_cursor", self.cursor))
        return [ShmEvent.from_json(self.host, e) for e in d.get("events", [])]

    def cli(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """linkguard-cli against this daemon (root: drain/undrain are allowed)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LINKGUARD")}
        return subprocess.run([_tool("linkguard-cli"), "--socket", str(self.grpc_socket),
                               *args], capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)

    def stderr(self) -> str:
        path = self.workdir / "stderr.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM by PID (SIGKILL after a grace period); removes the files it leaves."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        with contextlib.suppress(FileNotFoundError):
            self.shm_path.unlink()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_daemons(lab: Lab, args: list[str] | None = None) -> list[HostDaemon]:
    """One daemon per lab host, started together, all ready (or all stopped and LabError)."""
    daemons = [HostDaemon(lab, host, args) for host in lab.hosts]
    try:
        for d in daemons:
            d.start()
        for d in daemons:
            d.wait_ready()
    except BaseException:
        for d in daemons:
            d.stop()
        raise
    return daemons


def driver_env(lab: Lab, host: str) -> dict[str, str]:
    """What a driver in `host` needs: its daemon's shm file, the NIC pairs, NCCL's INFO log."""
    return {"LINKGUARD_SHM": f"/dev/shm/{lab.prefix}-{host}", "LINKGUARD_PAIRS": PAIRS,
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"}


def _bench_imports() -> Any:
    """bench.plugin_driver lives in the repository (like plugin/build), not in the package."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import bench.plugin_driver as pd

    return pd


# --- the demo ------------------------------------------------------------------------------

class _Say:
    """Live output, stamped relative to the demo's start; safe from reader threads."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.t0 = time.monotonic_ns()
        self.echo = echo
        self.lock = threading.Lock()

    def __call__(self, text: str, t_ns: int | None = None) -> None:
        t = (t_ns if t_ns is not None else time.monotonic_ns()) - self.t0
        with self.lock:
            self.echo(f"[{t / 1e9:7.3f} s] {text}")


class _Watch:
    """What the demo learns while it runs: plugin lines, daemon events, progress."""

    def __init__(self, say: _Say) -> None:
        self.say = say
        self.plugin: list[PluginLine] = []
        self.events: list[ShmEvent] = []
        self.progress: dict[str, dict[str, Any]] = {}
        self.last_shown = 0.0
        self.lock = threading.Lock()

    def on_line(self, line: Any) -> None:  # a bench.plugin_driver.StreamLine
        p = parse_progress(line.text)
        if p is not None:
            with self.lock:
                self.progress[line.role] = p
            self._maybe_show_traffic(p)
            return
        pl = parse_plugin_line(line.text)
        if pl is None:
            if line.text.startswith("lg_nccl_driver:"):
                self.say(f"driver ({_host(line.role)}): {line.text[16:].strip()}")
            return
        pl.role, pl.read_ns = line.role, line.read_ns
        with self.lock:
            self.plugin.append(pl)
        who = f"plugin in {_host(line.role)}"
        if pl.kind in ("failover", "reintegration", "warn"):
            label = {"failover": "SWITCHED", "reintegration": "REINTEGRATED",
                     "warn": "WARN"}[pl.kind]
            self.say(f"{who}: {label}: {pl.msg}", pl.when_ns)
        elif "path(s)" in pl.msg or "daemon" in pl.msg:
            self.say(f"{who}: {pl.msg}", pl.when_ns)

    def _maybe_show_traffic(self, p: dict[str, Any]) -> None:
        with self.lock:
            if p["what"] != "progress" or p.get("t", 0) - self.last_shown < 0.99:
                return
            self.last_shown = p.get("t", 0)
            both = dict(self.progress)
        verified = sum(int(v.get("received_bytes", 0)) for v in both.values())
        stall = max(float(v.get("stall_ms", 0)) for v in both.values())
        self.say(f"traffic a<->b: {human_bytes(verified)} received and verified, "
                 f"longest current stall {stall:.1f} ms")

    def poll_daemons(self, daemons: list[HostDaemon]) -> list[ShmEvent]:
        new = []
        for d in daemons:
            for e in d.new_events():
                new.append(e)
                self.say(f"linkguardd in {e.host}: {e.nic} {e.old} -> {e.new} "
                         f"({e.reason.lower()})", e.time_ns)
        self.events += new
        return new

    def lines(self, kind: str, after_ns: int = 0) -> list[PluginLine]:
        with self.lock:
            return [p for p in self.plugin if p.kind == kind and (p.when_ns or 0) >= after_ns]


def _host(role: str) -> str:
    return {"client": "a", "server": "b"}.get(role, role)


def _watch_for(watch: _Watch, daemons: list[HostDaemon], seconds: float,
               until: Callable[[], bool] | None = None, pair: Any = None) -> None:
    """Poll the daemons for `seconds` (bounded), or until `until()` holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        watch.poll_daemons(daemons)
        if until is not None and until():
            return
        if pair is not None and not pair.running():
            return
        time.sleep(0.05)


def run_demo(prefix: str | None = None, echo: Callable[[str], None] = click.echo, *,
             steady_s: float = 5.0, fault_s: float = 8.0, tail_s: float = 5.0,
             hold_down_ms: int = 2000, size: str = "256K") -> dict[str, Any]:
    """The whole demo; returns its summary (see the module doc). Always tears down."""
    pd = _bench_imports()
    lab = Lab(prefix or unique_prefix("lgd"), hosts=2, rails=2)
    say = _Say(echo)
    watch = _Watch(say)
    summary: dict[str, Any] = {"prefix": lab.prefix, "torn_down": False, "ok": False}
    daemons: list[HostDaemon] = []
    pair = None
    say(f"building lab {lab.prefix}: hosts a and b, each with NICs rail0 and rail1; "
        "one switch (bridge) per rail")
    try:
        lab.up()
        daemons = start_daemons(lab, ["--hold-down-ms", str(hold_down_ms)])
        pids = ", ".join(str(d.proc.pid) for d in daemons if d.proc)
        say(f"linkguardd running in a and b (pids {pids}); hold-down {hold_down_ms} ms; NICs: "
            + "; ".join(f"{d.host}: " + ", ".join(f"{k} {v}" for k, v in d.states().items())
                        for d in daemons))
        bound_s = steady_s + fault_s + hold_down_ms / 1e3 + tail_s + 30
        pair = pd.start_stream_pair(
            pd.lab_starter(lab, "b"), pd.lab_starter(lab, "a"), f"{lab.mgmt_address('b')}:7000",
            bound_s, ["--bidir", "--size", size, "--depth", "8", "--progress-ms", "250",
                      "--timestamps", "--gap-list-ms", "1", "--top-gaps", "20"],
            env={"LINKGUARD_PAIRS": PAIRS, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "NET"},
            server_env=driver_env(lab, "b"), client_env=driver_env(lab, "a"),
            timeout=bound_s + 30, on_line=watch.on_line)
        say(f"NCCL-like traffic through libnccl-net-linkguard.so, both ways, {size} messages, "
            "8 in flight, every byte verified; device 0 = rail0 (primary) + rail1 (standby)")
        _watch_for(watch, daemons, 20,
                   until=lambda: all(int(watch.progress.get(r, {}).get("completions", 0)) > 0
                                     for r in ("client", "server")), pair=pair)
        if not pair.running():
            raise LabError("the traffic did not start (see the driver's lines above)")
        _watch_for(watch, daemons, steady_s, pair=pair)

        t_cut = lab.cut("a", 0)
        summary["fault_ns"] = t_cut
        say(f"FAULT: cut a rail0 -- switch port {lab.topo.port('a', 0)} down, like a pulled "
            "cable: only a sees carrier loss", t_cut)
        _watch_for(watch, daemons, fault_s, pair=pair)
        t_restore = lab.restore("a", 0)
        summary["restore_ns"] = t_restore
        say(f"REPAIR: restore a rail0 -- switch port {lab.topo.port('a', 0)} up", t_restore)

        def back() -> bool:
            up = first_event(watch.events, nic="rail0", new="UP", after_ns=t_restore, host="a")
            return up is not None and bool(watch.lines("reintegration", up.time_ns))

        _watch_for(watch, daemons, hold_down_ms / 1e3 + 8, until=back, pair=pair)
        _watch_for(watch, daemons, tail_s, pair=pair)
        say("stopping the traffic (SIGUSR1: each side stops posting, drains, and checks that "
            "it received exactly what the other sent)")
        for proc in pair.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR1)  # the drivers we started, by PID
        server, client = pair.wait(timeout=60)
        watch.poll_daemons(daemons)
        summary.update(_summarise(watch, server, client, t_cut, t_restore))
        for line in _render(summary, watch):
            echo(line)
    finally:
        if pair is not None:
            pair.kill()
        for d in daemons:
            d.stop()
        lab.down()
        summary["torn_down"] = not lab.existing_namespaces()
        say(f"lab {lab.prefix} torn down (daemons, drivers, namespaces)")
    return summary


def _summarise(watch: _Watch, server: Any, client: Any, t_cut: int, t_restore: int
               ) -> dict[str, Any]:
    reports = {"server": server.report, "client": client.report}
    gaps: list[Gap] = []
    for role, rep in reports.items():
        gaps += report_gaps(role, rep)
    t_end = max(int(r.get("t_end_ns", 0) or 0) for r in reports.values()) or t_restore
    up = first_event(watch.events, nic="rail0", new="UP", after_ns=t_restore, host="a")
    # The switch's gap: from the cut to the last connection's switch (+50 ms); the whole
    # outage when the plugin logged none. The return's: from the daemon's UP to the last
    # switch back; it starts after the restore (a stall that began at the cut is the cut's).
    w_fault = switch_window(watch.plugin, "failover", t_cut, t_restore)
    w_back = switch_window(watch.plugin, "reintegration", up.time_ns if up else t_restore, t_end)
    g_fault = largest_gap(gaps, *w_fault)
    g_back = largest_gap([g for g in gaps if g.start_ns >= t_restore], *w_back)
    # For scale: the largest gap anywhere else in the run (this machine's own noise).
    g_noise = largest_gap([g for g in gaps if g not in (g_fault, g_back)
                           and not (g.start_ns <= w_fault[1] and g.end_ns >= w_fault[0])
                           and not (g.start_ns <= w_back[1] and g.end_ns >= w_back[0])],
                          0, t_end)

    def total(key: str) -> int:
        return sum(int(r.get(key, 0) or 0) for r in reports.values())

    down = first_event(watch.events, nic="rail0", new=("DOWN",), after_ns=t_cut - 10**9,
                       host="a")

    def line_dict(p: PluginLine, zero: int) -> dict[str, Any]:
        return {"host": _host(p.role or ""), "msg": p.msg, "kind": p.kind,
                "t_ms": ((p.when_ns or zero) - zero) / 1e6, "took_ms": p.took_ms,
                "reason": p.reason, "conn": p.conn}

    failovers = [line_dict(p, t_cut) for p in watch.lines("failover", t_cut)]
    reints = [line_dict(p, t_restore) for p in watch.lines("reintegration", t_restore)]
    warns = [line_dict(p, t_cut) for p in watch.lines("warn")]
    errors = [dict(e, role=role) for role, r in reports.items() for e in r.get("errors", [])]
    failures = [f"{_host(role)}: {r.get('failure')}" for role, r in reports.items()
                if r.get("failure")]
    out: dict[str, Any] = {
        "driver_ok": bool(server.ok and client.ok),
        "bytes_verified": total("bytes_received"),
        "messages_received": sum(c["completed"] for r in reports.values()
                                 for c in r.get("comms", []) if not c["send"]),
        "corrupt": total("corrupt_messages"), "missing": total("missing_messages"),
        "duplicated": total("duplicated_messages"), "reordered": total("reordered_messages"),
        "unwritten": total("unwritten_messages"), "size_mismatches": total("size_mismatches"),
        "errors": errors, "failures": failures,
        "detected": None if down is None else {
            "state": down.new, "reason": down.reason,
            "fact_ms": (down.fact_ns - t_cut) / 1e6, "decided_ms": (down.time_ns - t_cut) / 1e6},
        "up": None if up is None else {"reason": up.reason,
                                       "ms_after_restore": (up.time_ns - t_restore) / 1e6},
        "failovers": failovers, "reintegrations": reints, "warnings": warns,
        "gap_fault_ms": g_fault.ms if g_fault else None,
        "gap_restore_ms": g_back.ms if g_back else None,
        "gap_fault": _gap_dict(g_fault, t_cut), "gap_restore": _gap_dict(g_back, t_restore),
        "gap_elsewhere_ms": g_noise.ms if g_noise else None,
        "reports": reports,
    }
    out["lossless"] = (out["driver_ok"] and not errors and out["corrupt"] == 0
                       and out["missing"] == 0)
    out["ok"] = bool(out["lossless"] and failovers and reints)
    return out


def _gap_dict(g: Gap | None, zero: int) -> dict[str, Any] | None:
    if g is None:
        return None
    direction = "a->b" if g.dir == 0 else "b->a"
    return {"ms": g.ms, "direction": direction, "seen_by": _host(g.role),
            "side": "send" if g.send else "recv", "start_ms": (g.start_ns - zero) / 1e6,
            "end_ms": (g.end_ns - zero) / 1e6, "open": g.open}


def _render(s: dict[str, Any], watch: _Watch) -> list[str]:
    t_cut, t_restore = s["fault_ns"], s["restore_ns"]
    tl = Timeline()
    tl.add(t_cut, "FAULT", "cut a rail0 (switch port down: a loses carrier)")
    det = first_event(watch.events, nic="rail0", new=("DOWN",), after_ns=t_cut - 10**9,
                      host="a")
    if det:
        tl.add(det.fact_ns, "detected", f"linkguardd in a: monitor saw {det.reason.lower()} "
               "on rail0")
        tl.add(det.time_ns, "detected", f"linkguardd in a: rail0 {det.old} -> {det.new}, in "
               "shared memory for the plugin")
    for p in watch.plugin:
        if p.kind in ("failover", "reintegration", "warn"):
            tag = {"failover": "switched", "reintegration": "reintegrated", "warn": "plugin WARN"}
            tl.add(p.when_ns, tag[p.kind], f"plugin in {_host(p.role or '')}: {p.msg}")
    for e in watch.events:
        if e.time_ns > t_cut and not (det and e.seq == det.seq and e.host == det.host):
            tl.add(e.time_ns, "daemon", f"linkguardd in {e.host}: {e.nic} {e.old} -> {e.new} "
                   f"({e.reason.lower()})")
    tl.add(t_restore, "REPAIR", "restore a rail0 (switch port up)")
    for key, zero in (("gap_fault", t_cut), ("gap_restore", t_restore)):
        g = s.get(key)
        if g:
            start = zero + int(g["start_ms"] * 1e6)
            tl.add(start, "traffic gap", f"{g['ms']:.1f} ms without a completion ({g['direction']}, "
                   f"{g['side']} side in {g['seen_by']}){' -- never resumed' if g['open'] else ''}")
    out = ["", "Timeline (t = 0 at the cut):"]
    out += tl.render(t_cut)
    out.append("")
    out.append("Summary:")
    d = s.get("detected")
    out.append("  detected by linkguardd:  " + (
        f"{fmt_ms(d['fact_ms'])} (monitor), {fmt_ms(d['decided_ms'])} (DOWN published)"
        if d else "not seen"))
    if s["failovers"]:
        f = s["failovers"][0]
        took = f" (switch took {f['took_ms']:.3f} ms)" if f["took_ms"] is not None else ""
        out.append(f"  switched to rail1:       {fmt_ms(f['t_ms'])} in {f['host']}{took}; "
                   f"{len(s['failovers'])} switch line(s) from the plugin")
    else:
        out.append("  switched to rail1:       no failover line from the plugin")
    g = s.get("gap_fault")
    out.append("  traffic gap at the cut:  " + (
        f"{g['ms']:.1f} ms ({g['direction']})" + (" -- traffic never resumed" if g["open"] else "")
        if g else "none above 1 ms"))
    u = s.get("up")
    out.append("  rail0 UP again:          " + (
        f"{fmt_ms(u['ms_after_restore'])} after the restore ({u['reason'].lower()})"
        if u else "not seen"))
    if s["reintegrations"]:
        r = s["reintegrations"][0]
        out.append(f"  back on rail0:           {fmt_ms(r['t_ms'])} after the restore, in "
                   f"{r['host']}")
    else:
        out.append("  back on rail0:           no reintegration line from the plugin")
    g = s.get("gap_restore")
    out.append("  traffic gap at the return: " + (f"{g['ms']:.1f} ms ({g['direction']})"
                                                 if g else "none above 1 ms"))
    if s.get("gap_elsewhere_ms") is not None:
        out.append(f"  largest gap elsewhere in the run: {s['gap_elsewhere_ms']:.1f} ms (no "
                   "fault: this machine's own scheduling noise, for scale)")
    out.append(f"  bytes received and verified: {human_bytes(s['bytes_verified'])} "
               f"({s['messages_received']} messages)")
    out.append(f"  lost {s['missing']}, corrupted {s['corrupt']}, duplicated {s['duplicated']}, "
               f"reordered {s['reordered']}, errors returned to the driver {len(s['errors'])}")
    for f in s["failures"]:
        out.append(f"  connection failed: {f}")
    for e in s["errors"][:4]:
        out.append(f"  error: {e['call']} returned {e['code']} in {_host(e['role'])} "
                   f"(conn {e['conn']})")
    verdict = ("lossless failover and reintegration" if s["ok"] else
               "NOT lossless: see above" if not s["lossless"] else
               "no loss, but no failover/reintegration seen from the plugin")
    out.append(f"  => {verdict}")
    return out


def unwind_on_sigterm() -> Any:
    """From now on SIGTERM unwinds this process like Ctrl-C (its `finally` blocks tear the lab
    down), and only this process (see sigterm_unwinds). Returns the handler it replaced."""
    return signal.signal(signal.SIGTERM, functools.partial(sigterm_unwinds, os.getpid()))


def sigterm_unwinds(demo_pid: int, signum: int, frame: object) -> None:
    # Turn SIGTERM into an exception so run_demo's finally still tears the lab down, in the
    # demo's own process only. A forked child inherits this handler: pyroute2 forks one to open
    # each namespace's netlink socket and SIGTERMs it once it has handed the socket over. Had
    # it raised there, the child would have unwound a copy of the demo's stack and run its
    # teardown: the lab's namespaces deleted and the daemons' shm files removed under the
    # running demo ("no link a-r0", or the daemon's events never seen).
    sigterm_exits_a_fork(demo_pid, signum, frame)
    # Once: a second SIGTERM must not unwind the teardown the first one started. One comes
    # when the process runs under timeout(1), which forwards a signal to its child and then to
    # its whole process group; landing in the `finally`, it cut the teardown short and no
    # result was written (seen once in make test, test_gpu_check_flow's SIGTERM test).
    signal.signal(signal.SIGTERM, functools.partial(sigterm_exits_a_fork, demo_pid))
    raise SystemExit(128 + signum)


def sigterm_exits_a_fork(demo_pid: int, signum: int, frame: object) -> None:
    # A forked child exits at once; in the demo's own process (unwinding already) nothing.
    if os.getpid() != demo_pid:
        os._exit(128 + signum)


@click.command()
@click.option("--prefix", default=None, help="Lab prefix (default: a fresh lgdXXXX).")
@click.option("--fault-s", default=8.0, show_default=True, help="How long rail0 stays cut.")
def demo(prefix: str | None, fault_s: float) -> None:
    """Cut a rail under NCCL-like traffic and watch linkguard fail over and back."""
    require_root()
    if not (PLUGIN_BUILD / "lg_nccl_driver").exists():
        raise LabError("plugin/build/lg_nccl_driver is missing: run `make demo` (it builds it)")
    previous = unwind_on_sigterm()
    try:
        summary = run_demo(prefix, fault_s=fault_s)
    finally:
        signal.signal(signal.SIGTERM, previous)
    sys.stdout.flush()
    if not summary.get("lossless"):
        sys.exit(1)
