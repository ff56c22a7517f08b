#!/usr/bin/env python3
"""A stand-in for scontrol (slurm-client) with one node, for unit tests without a cluster.

It answers `-o show node NAME` in Slurm 22.05's one-line format (fields as the real scontrol
prints them, tests/lab/test_slurm.py checks the health check against the real one) and applies
`update nodename=NAME state=drain|resume [reason=...]` the way slurmctld does: drain sets the
DRAIN flag and the reason, resume clears both. Its state and a log of every call live in
<this program's path>.json; "fail": true makes every call exit 1 like an unreachable slurmctld.
Link or copy it anywhere: the state file follows argv[0].
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=2  CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
        "CPULoad=0.53 AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) "
        "NodeAddr=198.19.0.1 NodeHostName={name} Version=22.05.8 OS=Linux 6.1.0 #1 SMP  "
        "RealMemory=1 AllocMem=0 FreeMem=22672 Sockets=1 Boards=1 State={state} "
        "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=lab  "
        "BootTime=2026-12-01T08:23:04 SlurmdStartTime=2026-12-01T08:31:39 "
        "LastBusyTime=2026-12-01T08:31:43 CfgTRES=cpu=2,mem=1M,billing=2 AllocTRES= "
        "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
        "ExtSensorsTemp=n/s")


def main() -> int:
    path = Path(sys.argv[0]).with_suffix(".json")
    node = json.loads(path.read_text())
    args = sys.argv[1:]
    node["calls"].append(args)
    try:
        if node.get("fail"):
            print("slurm_load_node error: Unable to contact slurm controller (connect failure)",
                  file=sys.stderr)
            return 1
        if args[:3] == ["-o", "show", "node"] and len(args) == 4:
            if args[3] != node["name"]:
                print(f"Node {args[3]} not found", file=sys.stderr)
                return 1
            line = LINE.format(name=node["name"], state=node["state"])
            if node["reason"]:
                line += f" Reason={node['reason']} [root@2026-12-01T08:32:06]"
            print(line)
            return 0
        if args[:1] == ["update"]:
            fields = dict(a.split("=", 1) for a in args[1:])
            if fields.get("nodename") != node["name"]:
                print(f"Invalid node name specified: {fields.get('nodename')}", file=sys.stderr)
                return 1
            flags = [f for f in node["state"].split("+") if f != "DRAIN"]
            if fields.get("state") == "drain":
                if not fields.get("reason"):
                    print("You must specify a reason when DOWNING or DRAINING a node. Request "
                          "denied", file=sys.stderr)
                    return 1
                node["state"], node["reason"] = "+".join([*flags, "DRAIN"]), fields["reason"]
                return 0
            if fields.get("state") == "resume":
                node["state"], node["reason"] = "+".join(flags), ""
                return 0
        print(f"fake scontrol: unsupported arguments {args}", file=sys.stderr)
        return 2
    finally:
        path.write_text(json.dumps(node))


if __name__ == "__main__":
    sys.exit(main())
