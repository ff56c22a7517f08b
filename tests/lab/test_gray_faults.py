"""The lab's gray faults are what they claim (issue #12): a lossy port loses about the share of
frames asked for, a slow port passes no more than its rate, a stalled flow passes nothing while
another flow on the same rail goes on; carrier stays up in all three, and each undo restores the
link. Traffic is bounded in count and time, between lab addresses only.

Rates are upper bounds (a loaded machine only moves less), loss is read from nftables' own
counters as well as from the traffic, so none of this depends on how fast the machine is.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from click.testing import CliRunner

from linkguard_lab.cli import cli
from linkguard_lab.errors import LabError
from linkguard_lab.gray import parse_rate
from linkguard_lab.lab import Lab

pytestmark = pytest.mark.lab

PINGS = 400


def ping_loss(lab: Lab, rail: int, count: int = PINGS) -> float:
    """Share of `count` pings from a to b over `rail` that got no reply (bounded: ~2 s)."""
    out = lab.run("a", ["ping", "-n", "-q", "-c", str(count), "-i", "0.005", "-W", "1",
                        lab.address("b", rail)]).stdout
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    assert m, out
    return 1 - int(m[2]) / int(m[1])


# A bounded TCP flow: the receiver counts what arrives in `seconds`, the sender sends for as
# long, from `cport` if given. Prints (receiver) "BYTES SECONDS".
RECEIVER = """
import socket, sys, time
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(1)
ls.settimeout(10)
c, _ = ls.accept()
c.settimeout(1)
got, first, last, end = 0, None, None, time.monotonic() + float(sys.argv[3]) + 5
while time.monotonic() < end:
    try:
        b = c.recv(1 << 16)
    except (TimeoutError, socket.timeout):
        continue
    if not b:
        break
    now = time.monotonic()
    first = first or now
    last, got = now, got + len(b)
print(got, (last - first) if first and last and last > first else 0.0)
"""
SENDER = """
import socket, sys, time
s = socket.socket()
if len(sys.argv) > 4:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", int(sys.argv[4])))
s.settimeout(5)
s.connect((sys.argv[1], int(sys.argv[2])))
buf, end = b"x" * (1 << 16), time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        s.send(buf)
    except (TimeoutError, socket.timeout):
        pass
s.close()
"""


def flow(lab: Lab, seconds: float = 2.0, port: int = 5201, cport: int | None = None
         ) -> tuple[int, float]:
    """One bounded TCP flow a -> b over rail 0: (bytes received, seconds they took)."""
    addr = lab.address("b", 0)
    receiver = lab.popen("b", ["python3", "-c", RECEIVER, addr, str(port), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
    try:
        argv = ["python3", "-c", SENDER, addr, str(port), str(seconds)]
        for _ in range(50):  # until the receiver listens (bounded)
            if lab.run("a", argv + ([str(cport)] if cport else []), timeout=seconds + 30
                       ).returncode == 0:
                break
            time.sleep(0.1)
        out, _ = receiver.communicate(timeout=seconds + 30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait(timeout=10)
    got, took = out.split()
    return int(got), float(took)


def test_lossy_drops_about_the_share_asked_for_with_carrier_up(lab: Lab) -> None:
    assert ping_loss(lab, 0, 50) == 0
    lab.lossy("a", 0, 20)
    try:
        assert lab.carrier("a", 0)
        loss = ping_loss(lab, 0)
        faults = lab.gray_faults()[("a", 0)]
    finally:
        lab.unlossy("a", 0)
    # A round trip crosses the port twice: 1 - 0.8^2 = 36 % expected; the bounds are loose
    # enough for 400 samples (> 4 standard deviations).
    assert 0.2 < loss < 0.55, loss
    (fault,) = faults
    assert fault["kind"] == "lossy" and fault["dropped"] > 0.1 * 2 * PINGS * 0.8
    assert ping_loss(lab, 1, 50) == 0  # the other rail is untouched
    assert ("a", 0) not in lab.gray_faults() and ping_loss(lab, 0, 50) == 0


def test_slow_passes_no_more_than_its_rate(lab: Lab) -> None:
    rate = parse_rate("2MB")
    lab.slow("a", 0, "2MB")
    try:
        assert lab.carrier("a", 0)
        received, took = flow(lab)
        faults = lab.gray_faults()[("a", 0)]
    finally:
        lab.unslow("a", 0)
    assert received > 0 and took > 0.5, (received, took)
    got = received / took
    # At most the rate, plus its initial burst spread over the run, plus slack for framing.
    assert 0 < got < 1.6 * rate, (got, rate)
    assert faults[0]["kind"] == "slow" and faults[0]["dropped"] > 0
    assert ("a", 0) not in lab.gray_faults()


def test_stall_stops_one_flow_while_another_passes(lab: Lab) -> None:
    lab.stall("a", 0, 40001)
    try:
        assert lab.carrier("a", 0)
        stalled = lab.run("a", ["python3", "-c", CONNECT, lab.address("b", 0), "40001"],
                          timeout=30)
        other, _took = flow(lab, seconds=1.0, cport=40002)
        faults = lab.gray_faults()[("a", 0)]
    finally:
        lab.unstall("a", 0)
    assert stalled.stdout.strip() == "timeout", stalled.stdout + stalled.stderr
    assert other > 1 << 20
    assert faults[0]["kind"] == "stall" and faults[0]["dropped"] > 0
    again = lab.run("a", ["python3", "-c", CONNECT, lab.address("b", 0), "40001"], timeout=30)
    assert again.stdout.strip() in ("connected", "refused"), again.stdout  # passes again


# A TCP connect from local port 40001 to ADDR:9 (nothing listens: RST, "refused"), bounded by a
# 2 s timeout: a stalled flow gets no answer at all.
CONNECT = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[2])))
s.settimeout(2)
try:
    s.connect((sys.argv[1], 9))
    print("connected")
except ConnectionRefusedError:
    print("refused")
except (TimeoutError, socket.timeout):
    print("timeout")
"""


def test_gray_faults_stack_and_show_in_status(lab: Lab) -> None:
    runner = CliRunner()
    p = ["--prefix", lab.prefix]
    for args in (["lossy", *p, "b", "1", "5"], ["slow", *p, "b", "1", "100MB"],
                 ["stall", *p, "b", "1", "5201"]):
        res = runner.invoke(cli, args)
        assert res.exit_code == 0, res.output
    rows = {(r["host"], r["rail"]): r for r in lab.status()}
    assert rows[("b", 1)]["faults"] == ["lossy", "slow", "stall"]
    assert rows[("b", 1)]["carrier"] and not rows[("a", 1)]["faults"]
    res = runner.invoke(cli, ["unslow", *p, "b", "1"])
    assert res.exit_code == 0
    assert {(r["host"], r["rail"]): r for r in lab.status()}[("b", 1)]["faults"] == [
        "lossy", "stall"]
    for undo in ("unlossy", "unstall"):
        assert runner.invoke(cli, [undo, *p, "b", "1"]).exit_code == 0
    assert all(not r["faults"] for r in lab.status())


@pytest.mark.parametrize("args, message", [
    (["lossy", "a", "0", "0"], "bad loss '0'"),
    (["lossy", "a", "0", "101"], "bad loss '101'"),
    (["lossy", "a", "0", "lots"], "bad loss 'lots'"),
    (["slow", "a", "0", "fast"], "bad rate 'fast'"),
    (["slow", "a", "0", "10"], "must be 1 kB/s"),
    (["stall", "a", "0", "70000"], "bad TCP port '70000'"),
    (["stall", "z", "0", "80"], "unknown host 'z'"),
    (["lossy", "a", "9", "5"], "unknown rail '9'"),
])
def test_bad_gray_fault_arguments_name_the_problem(lab: Lab, args: list[str],
                                                   message: str) -> None:
    res = CliRunner().invoke(cli, [args[0], "--prefix", lab.prefix, *args[1:]])
    assert res.exit_code == 2, res.output
    assert message in res.output, res.output
    assert all(not r["faults"] for r in lab.status())


def test_rates_parse_in_the_units_operators_write() -> None:
    assert parse_rate("100MB") == 100_000_000
    assert parse_rate("100MiB") == 100 << 20
    assert parse_rate("800mbit") == 100_000_000
    assert parse_rate("1500000") == 1_500_000
    assert parse_rate("2.5 GB/s") == 2_500_000_000
    for bad in ("", "MB", "-5MB", "5TB", "5 MB extra"):
        with pytest.raises(LabError):
            parse_rate(bad)
