"""The plugin's layers, read from its includes (plugin/README.md draws them).

plugin/src has one folder per layer. A file includes headers of its own folder, of layers
below it and of plugin/include; never of a layer above (upcalls are function pointers handed
down, or, for a transport, the protocol's upcall API: proto/upcall.h), never a transport's own headers unless it chooses the transport (the protocol knows
the interface only), and no header includes itself back through others.
The upward reaches left are listed exactly below: each is work of issue 27 (the transports'
state split out of the protocol's objects), so the list may only shrink."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "plugin" / "src"
_INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)

# Higher ranks use lower ones. The transport interface (types only) sits under the protocol
# that drives it and the transports that implement it; the choice of transport sits above both.
RANKS = {
    "abi/export": 90,
    "abi": 80,
    "transport/transport_select": 75,
    "proto": 70,
    "transport/tcp": 60,
    "transport/inner": 60,
    "transport/fake": 60,
    "transport/transport": 55,
    "session": 50,
    "daemon": 40,
    "runtime": 30,
}

# A transport's own headers are for itself and for whoever chooses and starts the transport;
# the protocol knows only the interface (transport/transport.h).
IMPLEMENTATIONS = {"transport/tcp", "transport/inner", "transport/fake"}
CHOOSERS = {"transport/transport_select", "abi", "abi/export"}

# The protocol's one header made for the transports: the upcalls they may make (a receive
# placed, a path broken, stalled or gray, a peer's lie) and the epoch rule they apply. It
# declares functions only, and includes nothing of the protocol (test below).
UPCALL_API = "proto/upcall.h"

# Transports still read and write the protocol's objects (conn.h) instead of keeping all their
# state behind the endpoint pointers: TCP's data streams and chunk cursor are lg_path's and
# lg_conn's fields (issue 27).
KNOWN_UPWARD = {
    "transport/inner/inner_endpoint.c -> proto/conn.h",
    "transport/tcp/tcp_recv.c -> proto/conn.h",
}


def _layer(rel: str) -> str:
    folder, stem = rel.rsplit("/", 1)[0] if "/" in rel else "", Path(rel).stem
    if folder == "transport":
        return f"transport/{stem}"
    return folder


def _includes() -> dict[str, list[str]]:
    out = {}
    for path in sorted(SRC.rglob("*.[ch]")):
        rel = path.relative_to(SRC).as_posix()
        out[rel] = _INCLUDE.findall(path.read_text())
    return out


def test_every_source_file_is_in_a_layer() -> None:
    files = _includes()
    assert len(files) > 90, "plugin/src was not found"
    assert sorted(rel for rel in files if _layer(rel) not in RANKS) == []


def test_includes_name_a_file_by_its_folder() -> None:
    files = _includes()
    wrong = [f"{rel}: {inc}" for rel, incs in files.items() for inc in incs
             if inc not in files and not (SRC.parent / "include" / inc).exists()
             and not (SRC / inc).exists()]
    assert wrong == []


def test_nothing_includes_a_layer_above_it_or_a_transport_inside_but_the_listed_reaches() -> None:
    files = _includes()
    upward = set()
    for rel, incs in files.items():
        for inc in incs:
            if inc not in files:
                continue  # plugin/include
            a, b = _layer(rel), _layer(inc)
            if inc == UPCALL_API and a in IMPLEMENTATIONS:
                continue  # the upcalls, by design
            private = b in IMPLEMENTATIONS and a not in CHOOSERS
            if a != b and (RANKS[b] >= RANKS[a] or private):
                upward.add(f"{rel} -> {inc}")
    assert sorted(upward - KNOWN_UPWARD) == [], "a new include up or across the layers"
    assert sorted(KNOWN_UPWARD - upward) == [], "gone: take it off KNOWN_UPWARD"


def test_the_upcall_api_includes_nothing_of_the_protocol() -> None:
    """Else a transport would reach the protocol's objects through it."""
    incs = _includes()[UPCALL_API]
    assert [i for i in incs if _layer(i) == "proto"] == []
    assert "struct lg_conn {" not in (SRC / UPCALL_API).read_text()


_PROTOTYPE = re.compile(r"^(?!static)[a-z][^;(]*?\b(lg_\w+)\(", re.MULTILINE)


def test_a_transport_calls_the_protocol_only_through_the_upcall_api() -> None:
    """conn.h still gives the transports the protocol's objects and their inline helpers
    (issue 27); its other functions (making, starting, retiring objects) are not theirs."""
    conn_fns = set(_PROTOTYPE.findall((SRC / "proto" / "conn.h").read_text()))
    assert {"lg_conn_new", "lg_path_retire"} <= conn_fns, "conn.h's prototypes were not found"
    calls = sorted(f"{path.relative_to(SRC).as_posix()}: {fn}"
                   for path in SRC.glob("transport/*/*.c")
                   for fn in conn_fns if re.search(rf"\b{fn}\(", path.read_text()))
    assert calls == []


def test_no_header_includes_itself_back() -> None:
    files = _includes()
    graph = {rel: [i for i in incs if i in files] for rel, incs in files.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for rel in graph:
        if rel not in state:
            visit(rel, [rel])
    assert cycles == []
