"""linkguard_lab.timeline: reading the driver's and the plugin's lines, and gaps around a fault."""

from __future__ import annotations

from linkguard_lab.timeline import (
    Gap,
    Timeline,
    fmt_ms,
    human_bytes,
    largest_gap,
    parse_plugin_line,
    parse_progress,
    report_gaps,
    switch_window,
)


def test_plugin_line_with_the_drivers_timestamp() -> None:
    p = parse_plugin_line("[plugin INFO src/abi/core.c:209 t=5012.000123456] NET/linkguard: send "
                          "conn 1042e151c1e1849d on dev 0: 2 path(s), 2 stream(s) each")
    assert p is not None and p.kind == "info" and p.level == "INFO"
    assert p.t_ns == 5012_000_123_456 and p.conn == "send 1042e151c1e1849d"
    assert p.msg.startswith("send conn")


def test_plugin_line_without_a_timestamp_uses_the_read_time() -> None:
    p = parse_plugin_line("[plugin WARN src/proto/conn.c:179] NET/linkguard: recv conn 00ff00ff00ff00ff:"
                          " primary path on NIC rail0 to 198.18.0.2:4000 failed (timeout)")
    assert p is not None and p.kind == "warn" and p.t_ns is None
    p.read_ns = 7
    assert p.when_ns == 7


def test_failover_and_reintegration_are_recognised_by_their_words() -> None:
    lines = {
        "send conn 0123456789abcdef: failover from rail0 to rail1 (daemon: rail0 DOWN) "
        "took 1.25 ms, replayed 3 message(s)": ("failover", 1.25),
        "send conn 0123456789abcdef: switched to the backup path on rail1, reason=peer "
        "reported its primary down, in 850 us": ("failover", 0.85),
        "recv conn 0123456789abcdef: now on backup path rail1 (epoch 2)": ("failover", None),
        "send conn 0123456789abcdef: reintegrated onto rail0 (primary UP) in 2.5 ms":
            ("reintegration", 2.5),
        "send conn 0123456789abcdef: switched back to the primary path on rail0 after 1.1 ms":
            ("reintegration", 1.1),
    }
    for msg, (kind, took) in lines.items():
        p = parse_plugin_line(f"[plugin INFO src/proto/failover.c:1 t=1.5] NET/linkguard: {msg}")
        assert p is not None and p.kind == kind, msg
        assert p.took_ms == took, msg
        assert p.conn == ("recv" if msg.startswith("recv") else "send") + " 0123456789abcdef"
        assert p.t_ns == 1_500_000_000
    p = parse_plugin_line("[plugin INFO x.c:1 t=1.0] NET/linkguard: send conn 0123456789abcdef: "
                          "failover to rail1 (reason: carrier lost on rail0)")
    assert p is not None and p.reason == "reason: carrier lost on rail0"


def test_other_lines_are_not_plugin_lines() -> None:
    assert parse_plugin_line("lg_nccl_driver: progress t=1.0 completions=3") is None
    assert parse_plugin_line("") is None


def test_progress_line() -> None:
    p = parse_progress("lg_nccl_driver: progress t=4970.722825 elapsed=0.500 sent_bytes=508035072 "
                       "received_bytes=411303936 completions=3507 max_gap_ms=4.155 "
                       "stall_ms=0.000 corrupt=0")
    assert p == {"what": "progress", "t": 4970.722825, "elapsed": 0.5, "sent_bytes": 508035072,
                 "received_bytes": 411303936, "completions": 3507, "max_gap_ms": 4.155,
                 "stall_ms": 0.0, "corrupt": 0}
    assert parse_progress("[plugin INFO a.c:1] x") is None


def test_gaps_of_a_report_and_the_largest_around_a_fault() -> None:
    report = {"comms": [{"comm": 0, "conn": 0, "dir": 0, "send": True},
                        {"comm": 1, "conn": 0, "dir": 1, "send": False}],
              "gaps": {"list": [[0, 100, 200], [1, 150, 900], [0, 1000, 1100, 1]]}}
    gaps = report_gaps("client", report)
    assert gaps[1] == Gap("client", 1, 0, 1, False, 150, 900)
    assert gaps[2].open and gaps[2].ms == 100 / 1e6
    assert largest_gap(gaps, 160, 170) == gaps[1]
    assert largest_gap(gaps, 950, 960) is None
    assert largest_gap(gaps, 0, 10_000) == gaps[1]


def test_timeline_renders_relative_to_zero_in_time_order() -> None:
    tl = Timeline()
    tl.add(3_000_000, "b", "later")
    tl.add(1_000_000, "a", "zero")
    tl.add(None, "x", "dropped: no time")
    lines = tl.render(1_000_000)
    assert len(lines) == 2 and "zero" in lines[0] and "+0.000 ms" in lines[0]
    assert "+2.000 ms" in lines[1]
    assert fmt_ms(-12.34) == "-12.3 ms" and fmt_ms(2500) == "+2.500 s"
    assert human_bytes(512) == "512 B" and human_bytes(3 << 30) == "3.00 GiB"


def test_the_plugins_own_switch_lines() -> None:
    """The lines plugin/src/proto/failover.c writes (INFO, NET), as lg_nccl_driver prints them."""
    send = ("[plugin INFO src/proto/failover.c:460 t=4392.000000001] NET/linkguard: send conn "
            "c45391278da5a2fb: failover: primary path on NIC rail0 -> backup path on NIC rail1 "
            "(NIC rail0 is DOWN (daemon)); epoch 1, replaying 8 message(s) from #7661 (cursor "
            "was #7669); switch took 2.09 ms")
    recv = ("[plugin INFO src/proto/failover.c:610 t=4392.5] NET/linkguard: recv conn "
            "c45391278da5a2fb: reintegrated: backup path on NIC rail1 -> primary path on NIC "
            "rail0 at epoch 2 (asked by the sender); 0 partial receive(s) reset, resuming at "
            "message #20874; switch took 0.01 ms")
    same = ("[plugin INFO src/proto/failover.c:460 t=1.0] NET/linkguard: send conn c45391278da5a2fb: "
            "switched: backup path on NIC rail1 -> backup path on NIC rail1 (path rebuilt); "
            "epoch 3, replaying 0 message(s) from #5 (cursor was #5); switch took 0.50 ms")
    p, q, r = parse_plugin_line(send), parse_plugin_line(recv), parse_plugin_line(same)
    assert p is not None and q is not None and r is not None
    assert (p.kind, p.took_ms, p.reason) == ("failover", 2.09, "NIC rail0 is DOWN (daemon)")
    assert p.conn == "send c45391278da5a2fb" and p.t_ns == 4392_000_000_001
    assert (q.kind, q.took_ms, q.reason) == ("reintegration", 0.01, "asked by the sender")
    assert r.kind == "switch"
    assert switch_window([p, q], "failover", 4000_000_000_000, 5000_000_000_000, 10) == (
        4000_000_000_000, 4392_000_000_011)
    assert switch_window([p], "reintegration", 1, 2) == (1, 2)
