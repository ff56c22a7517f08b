"""linkguardd end to end in the lab: real kernel link events in, shared memory out.

One daemon per lab host, each with its own shm file; faults come from the lab (switch port down,
host NIC down, blackhole, flaps). Results are read through the plugin's C reader (lg_shm_dump,
what an NCCL process sees) and through Python (ShmReader), and from the daemon's structured
log. Hold-down and damping are shortened so each test takes seconds. Every wait is bounded;
no assertion depends on how long the test machine took (assertions on time compare the daemon's
own timestamps with the settings it was given).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess

import pytest
from daemon_fixture import Daemon, Daemons, c_tool, wait_for
from ops_helpers import LINKGUARD_CLI, clean_env, describe, run_cli

from linkguard_lab.lab import Lab
from linkguardd.shm.layout import LG_NIC_F_CARRIER, LG_NIC_F_PRESENT, Event
from linkguardd.states import NicState, Reason

pytestmark = pytest.mark.lab

HOLD_DOWN_MS = 500
NS_PER_MS = 1_000_000
WAIT_S = 5.0  # bound for anything event-driven (a transition takes well under 1 ms here)
FAST = ("--interfaces", "rail0,rail1", "--hold-down-ms", str(HOLD_DOWN_MS))


def rail0_events(d: Daemon, since: int) -> list[Event]:
    return [e for e in d.events(since) if e.name == "rail0"]


def steps(events: list[Event]) -> list[tuple[str, str, str]]:
    return [(NicState(e.old_state).name, NicState(e.new_state).name, Reason(e.reason).name)
            for e in events]


def test_cut_restore_two_hosts(lab: Lab, daemons: Daemons) -> None:
    a = daemons.start(lab, "a", *FAST)
    b = daemons.start(lab, "b", *FAST)
    b_before = b.nic("rail0")
    assert b_before.state == NicState.UP
    head = a.ring_head()

    lab.cut("a", 0)
    seen = a.c_wait_state("rail0", NicState.DOWN, WAIT_S)  # what the plugin would see
    assert seen["reason"] == "CARRIER_LOST"
    down = a.nic("rail0")  # ... and the same through Python
    assert (down.state, down.reason, down.epoch) == (NicState.DOWN, Reason.CARRIER_LOST,
                                                     seen["epoch"])
    assert not down.flags & LG_NIC_F_CARRIER and down.flags & LG_NIC_F_PRESENT
    assert a.nic("rail1").state == NicState.UP
    # A switch-port cut is seen only by the host on that port (b's rail0 keeps carrier).
    b_rail0 = b.c_nics()["rail0"]
    assert (b_rail0["state"], b_rail0["epoch"]) == ("UP", b_before.epoch)

    lab.restore("a", 0)
    a.c_wait_state("rail0", NicState.UP, HOLD_DOWN_MS / 1000 + WAIT_S)
    events = rail0_events(a, head)
    assert steps(events) == [("UP", "DOWN", "CARRIER_LOST"),
                             ("DOWN", "RECOVERING", "LINK_RESTORED"),
                             ("RECOVERING", "UP", "HOLDDOWN_EXPIRED")]
    assert [e.epoch for e in events] == [down.epoch, down.epoch + 1, down.epoch + 2]
    # UP only after the hold-down (daemon timestamps: the policy's rule, not our speed).
    assert events[2].time_ns - events[1].time_ns >= HOLD_DOWN_MS * NS_PER_MS
    # The C reader's view of the ring matches Python's, seq for seq.
    c_events = [e for e in a.c_dump(events_since=head)["events"] if e["name"] == "rail0"]
    assert [(e["seq"], e["epoch"], e["new_state"]) for e in c_events] == [
        (e.seq, e.epoch, NicState(e.new_state).name) for e in events]
    # b saw nothing but its own start-up.
    assert steps(b.events(0)) == [("UNKNOWN", "UP", "STARTUP")] * 2

    # One structured log line per transition, matching the shm events.
    logged = [t for t in a.transitions("rail0") if int(t["seq"]) > head]
    assert [(int(t["seq"]), t["from"], t["to"], t["reason"], int(t["epoch"])) for t in logged] == [
        (e.seq, *steps([e])[0], e.epoch) for e in events]
    assert logged[0]["detail"].startswith("carrier 0")
    assert float(logged[0]["detect_us"]) >= 0

    a.stop()  # SIGTERM: exit status 0 and the shm file removed (asserted by stop())
    assert "msg=stopped" in a.stderr()
    b.stop()


def test_flap_stays_out_until_penalty_decays(lab: Lab, daemons: Daemons) -> None:
    # Damping scaled down from the defaults (1000/2000/750, half-life 15 s, max 12000) so the
    # whole story fits in a few seconds: 10 flaps 250 ms apart push the penalty far past the
    # suppress threshold, and it decays below reuse within half_life * log2(max / reuse).
    half_life_ms, penalty, suppress, reuse, max_penalty = 500, 1000.0, 2000.0, 750.0, 12000.0
    hold_down_ms = 300
    a = daemons.start(lab, "a", "--interfaces", "rail0,rail1", "--hold-down-ms",
                      str(hold_down_ms), "--flap-half-life-ms", str(half_life_ms),
                      "--flap-penalty", str(penalty), "--flap-suppress-threshold", str(suppress),
                      "--flap-reuse-threshold", str(reuse), "--flap-max-penalty",
                      str(max_penalty))
    head = a.ring_head()

    # 250 ms apart: on a loaded machine the kernel's link-watch work runs late and merges
    # bounces closer than that into one event; the penalty still passes suppress at flap 3.
    stamps = lab.flap("a", 0, count=10, period_ms=250)
    assert len(stamps) == 20
    # Right after the last restore the link is up again, but the NIC must not be (damping
    # holds it for over a second here, far longer than this one read takes).
    now = a.c_nics()["rail0"]
    assert now["state"] in ("DOWN", "RECOVERING"), now

    max_suppress_s = half_life_ms / 1000 * math.log2(max_penalty / reuse)
    up = a.c_wait_state("rail0", NicState.UP, max_suppress_s + hold_down_ms / 1000 + WAIT_S)
    events = rail0_events(a, head)
    downs = [e for e in events if e.new_state == NicState.DOWN]
    assert downs and len(downs) <= 10  # every flap seen (a kernel may merge a quick bounce)
    assert all(e.reason == Reason.CARRIER_LOST for e in downs)
    assert steps(events[-2:]) == [("DOWN", "RECOVERING", "LINK_RESTORED"),
                                  ("RECOVERING", "UP", "HOLDDOWN_EXPIRED")]
    assert events[-1].epoch == up["epoch"]
    # It was held out by damping, not only by the hold-down.
    assert events[-1].time_ns - events[-2].time_ns > hold_down_ms * NS_PER_MS
    log = a.transitions("rail0")
    assert "suppressed for" in log[-3]["detail"]  # the last DOWN
    assert log[-2]["detail"].startswith("flap damping: penalty")  # the last RECOVERING
    assert a.nic("rail1").state == NicState.UP and a.nic("rail1").epoch == 1
    a.stop()


def test_blackhole_is_not_a_link_event(lab: Lab, daemons: Daemons) -> None:
    a = daemons.start(lab, "a", *FAST)
    before = a.nic("rail0")
    head = a.ring_head()

    lab.blackhole("a", 0)
    # Barrier instead of a sleep: a fault on rail1 issued after the blackhole. The kernel sends
    # link notifications in order on the daemon's one socket, so once rail1's DOWN is in shm any
    # rail0 notification the blackhole could have caused would have been handled already.
    lab.cut("a", 1)
    a.c_wait_state("rail1", NicState.DOWN, WAIT_S)
    assert lab.carrier("a", 0) and lab.blackholed("a", 0)
    after = a.nic("rail0")
    assert (after.state, after.epoch, after.last_change_ns) == (
        NicState.UP, before.epoch, before.last_change_ns)
    assert rail0_events(a, head) == []  # the plugin's gray-failure detection must catch it
    lab.unblackhole("a", 0)
    lab.restore("a", 1)
    a.stop()


def test_nicdown_is_admin_down(lab: Lab, daemons: Daemons) -> None:
    a = daemons.start(lab, "a", *FAST)
    b = daemons.start(lab, "b", *FAST)
    lab.nicdown("a", 0)
    seen = a.c_wait_state("rail0", NicState.DOWN, WAIT_S)
    assert seen["reason"] in ("ADMIN_DOWN", "OPER_DOWN")
    assert b.nic("rail0").state == NicState.UP and b.nic("rail0").epoch == 1
    lab.nicup("a", 0)
    a.c_wait_state("rail0", NicState.UP, HOLD_DOWN_MS / 1000 + WAIT_S)
    a.stop()
    b.stop()


def test_absent_nic_is_down_then_picked_up(lab: Lab, daemons: Daemons) -> None:
    a = daemons.start(lab, "a", "--interfaces", "rail0,rail1,rail9", "--hold-down-ms",
                      str(HOLD_DOWN_MS))
    seen = a.c_wait_state("rail9", NicState.DOWN, WAIT_S)
    assert seen["reason"] == "ABSENT"
    assert not a.nic("rail9").flags & LG_NIC_F_PRESENT
    assert a.nic("rail0").state == NicState.UP

    # The NIC appears (a driver loaded late, a hot-plugged card): a veth pair inside host a.
    ns = lab.ns("a")
    for cmd in (["link", "add", "rail9", "type", "veth", "peer", "name", "lgpeer9"],
                ["link", "set", "lgpeer9", "up"], ["link", "set", "rail9", "up"]):
        subprocess.run(["ip", "-n", ns, *cmd], check=True, capture_output=True, timeout=30)
    up = a.c_wait_state("rail9", NicState.UP, HOLD_DOWN_MS / 1000 + WAIT_S)
    assert up["reason"] == "HOLDDOWN_EXPIRED"  # a NIC that appears earns UP via the hold-down
    rail9 = a.nic("rail9")
    assert rail9.flags & LG_NIC_F_PRESENT and rail9.ifindex > 0
    assert steps([e for e in a.events(0) if e.name == "rail9"]) == [
        ("UNKNOWN", "DOWN", "ABSENT"), ("DOWN", "RECOVERING", "LINK_RESTORED"),
        ("RECOVERING", "UP", "HOLDDOWN_EXPIRED")]
    a.stop()


def test_sighup_reload_keeps_unchanged_nics(lab: Lab, daemons: Daemons) -> None:
    # Settings changed by SIGHUP live in the config file: flags would override the file.
    # Statistics and DOM sampling slowed to once a minute: each sample re-evaluates the policy,
    # which would hide a hold-down timer that is not re-armed by the reload.
    old_hold_ms, new_hold_ms = 2000, 3000
    quiet = ("--stats-interval-s", "60", "--dom-interval-s", "60")
    a = daemons.start(lab, "a", *quiet, config={"interfaces": ["rail0", "rail1"],
                                                "hold_down_ms": old_hold_ms})
    rail1 = a.nic("rail1")
    lab.cut("a", 0)
    a.c_wait_state("rail0", NicState.DOWN, WAIT_S)
    lab.restore("a", 0)
    recovering = a.c_wait_state("rail0", NicState.RECOVERING, WAIT_S)

    # Reload 1, while rail0 is in its hold-down: a longer hold-down, nothing else.
    a.write_config({"interfaces": ["rail0", "rail1"], "hold_down_ms": new_hold_ms})
    head = a.ring_head()
    a.hup()
    wait_for(lambda: a.stderr().count("msg=reloaded") == 1, WAIT_S, "the reload's log line")
    now = a.c_nics()  # rail0 is still in the hold-down it started, rail1 untouched
    assert (now["rail0"]["state"], now["rail0"]["epoch"]) == ("RECOVERING", recovering["epoch"])
    assert (now["rail1"]["state"], now["rail1"]["epoch"], now["rail1"]["last_change_ns"]) == (
        "UP", rail1.epoch, rail1.last_change_ns)
    # The new hold-down applies to the running one: UP no earlier than new_hold_ms after the
    # restore, and not left RECOVERING when the old deadline passes.
    a.c_wait_state("rail0", NicState.UP, new_hold_ms / 1000 + WAIT_S)
    events = a.events(head)
    assert steps(events) == [("RECOVERING", "UP", "HOLDDOWN_EXPIRED")]
    restored = [e for e in a.events(0) if e.name == "rail0"][-2]
    assert events[0].time_ns - restored.time_ns >= new_hold_ms * NS_PER_MS

    # Reload 2: one more NIC (absent here). The others keep state, epoch and time of change.
    before = a.nics()
    a.write_config({"interfaces": ["rail0", "rail1", "rail7"], "hold_down_ms": new_hold_ms})
    head = a.ring_head()
    a.hup()
    seen = a.c_wait_state("rail7", NicState.DOWN, WAIT_S)
    assert seen["reason"] == "ABSENT"
    after = a.nics()
    for name in ("rail0", "rail1"):
        assert (after[name].state, after[name].epoch, after[name].last_change_ns) == (
            before[name].state, before[name].epoch, before[name].last_change_ns)
    assert [e.name for e in a.events(head)] == ["rail7"]
    a.stop()


def test_waitevent_stamps_are_causal(lab: Lab, daemons: Daemons) -> None:
    """bench/detect_latency.py's C waiter: the fault's stamp (the lab's process), the monitor's,
    the policy's and the reader's are one clock across namespaces, so they must be in causal
    order; a reader that saw an event before the fault would make the benchmark meaningless."""
    a = daemons.start(lab, "a", *FAST)
    argv = [str(c_tool("lg_shm_waitevent")), "--path", str(a.shm_path), "--max-events", "1",
            "--open-timeout-ms", "10000", "--idle-timeout-ms", "10000"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as waiter:
        assert waiter.stdout is not None
        ready = json.loads(waiter.stdout.readline() or "{}")  # the tool bounds its own waits
        assert ready.get("ready") and ready["pid"] == a.pid, ready
        t_cut = lab.cut("a", 0)
        out, _ = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, out
    ev = json.loads(out.splitlines()[-1])
    assert (ev["name"], ev["new_state"], ev["reason"]) == ("rail0", "DOWN", "CARRIER_LOST")
    # The table is published before the event, and both after the decision.
    assert t_cut <= ev["fact_ns"] <= ev["time_ns"] <= ev["table_seen_ns"] <= ev["seen_ns"]
    lab.restore("a", 0)
    a.stop()


def test_a_drain_survives_a_crash_and_a_clean_restart(lab: Lab, daemons: Daemons) -> None:
    """The cable swap outlives the daemon: killed mid-maintenance (SIGKILL: no chance to save
    anything then) and restarted, the first table it publishes already has the NIC DRAINED.
    Event numbers go on from where they were, so an old `--since` means the same events."""
    a = daemons.start(lab, "a", *FAST)
    drained = run_cli(lab, "a", a.grpc_socket, "drain", "rail1", "--reason", "swap optic 17")
    assert drained.returncode == 0, describe(drained)
    head = a.ring_head()
    os.kill(a.pid, signal.SIGKILL)  # the daemon this test started, by PID
    assert a.proc is not None
    a.proc.wait(timeout=10)
    a.close_reader()

    a.start()
    argv = [str(LINKGUARD_CLI), "--socket", str(a.grpc_socket), "--ro-socket",
            str(a.grpc_ro_socket)]
    listed = lab.run("a", [*argv, "events", "-o", "json"], timeout=30, env=clean_env())
    first = [json.loads(line) for line in listed.stdout.splitlines()]
    assert first and first[0]["seq"] > head, describe(listed)  # no number reused after a crash
    assert (first[0]["nic"], first[0]["old_state"], first[0]["new_state"], first[0]["reason"]) \
        == ("rail1", "UNKNOWN", "DRAINED", "OPERATOR_DRAIN")  # before anything else published
    assert a.c_nics()["rail1"]["state"] == "DRAINED"
    assert "rail1 stays DRAINED across the restart" in a.stderr()
    status = lab.run("a", [*argv, "status", "rail1", "-o", "json"], timeout=30, env=clean_env())
    assert status.returncode == 1, describe(status)
    assert json.loads(status.stdout)["nics"][0]["drain_reason"] == "swap optic 17"

    # A clean restart continues right after the last event, and a --since from the future
    # (another host, a lost state directory) is refused with the newest number.
    new_head = a.ring_head()
    a.stop()
    a.start()
    assert a.events(new_head)[0].seq == new_head + 1
    ahead = run_cli(lab, "a", a.grpc_socket, "events", "--since", str(new_head + 1000))
    assert ahead.returncode == 2, describe(ahead)
    assert f"there is no event #{new_head + 1000} yet" in ahead.stderr
    undrained = run_cli(lab, "a", a.grpc_socket, "undrain", "rail1")
    assert undrained.returncode == 0, describe(undrained)
    a.stop()
    assert json.loads((a.state_dir / "state.json").read_text())["drains"] == {}
