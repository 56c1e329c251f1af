#!/usr/bin/env python3
"""Prints the resources a bf-p4c compile of p4/tna uses, from the compiler's
own reports: pipe/logs/resources.json (MAU stages, memories, ALUs) and
pipe/logs/phv.json (PHV containers).

    p4/resources.py p4/build/tna

One row per MAU stage, then the totals against what Tofino has. p4/build.sh
tna runs it after a compile; p4/README.md ("TNA resources") records its
output.
"""

import json
import sys
from pathlib import Path


def count(stage, key, inner):
    """Units of one resource a stage uses (a list under `inner`)."""
    return len(stage.get(key, {}).get(inner, []))


def stage_row(stage):
    tables = [t["table_name"] for t in stage["logical_tables"]["ids"]]
    return {
        "stage": stage["stage_number"],
        "sram": count(stage, "rams", "srams"),
        "tcam": count(stage, "tcams", "tcams"),
        "map_ram": count(stage, "map_rams", "maprams"),
        "salu": count(stage, "meter_alus", "meters"),
        "stats_alu": count(stage, "statistic_alus", "stats"),
        "gateway": count(stage, "gateways", "gateways"),
        "logical_table": len(tables),
        "tables": tables,
    }


def phv_use(phv):
    """Containers used, by gress and width, out of the device's."""
    used = {}
    for c in phv["containers"]:
        key = (c["gress"], c["container_type"], c["bit_width"])
        used[key] = used.get(key, 0) + 1
    return used


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: p4/resources.py <bf-p4c output directory>")
    out = Path(sys.argv[1])
    logs = out / "pipe" / "logs"
    try:
        res = json.loads((logs / "resources.json").read_text())["resources"]
        phv = json.loads((logs / "phv.json").read_text())
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"resources.py: no compiler report in {logs}: {e}")
    stages = [stage_row(s) for s in res["mau"]["mau_stages"]]
    cols = ["stage", "sram", "tcam", "map_ram", "salu", "stats_alu", "gateway", "logical_table"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for row in stages:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    limits = {"sram": 80, "tcam": 24, "map_ram": 48, "salu": 4, "stats_alu": 4,
              "gateway": 16, "logical_table": 16}
    n = res["mau"]["nStages"]
    busy = sum(1 for r in stages if r["logical_table"] > 0)
    print(f"\nstages with tables: {busy} of {n}")
    for c, per_stage in limits.items():
        total = sum(r[c] for r in stages)
        print(f"{c}: {total} of {per_stage * n} ({per_stage} per stage)")
    print("\nPHV containers used (gress, kind, width: count):")
    for (gress, kind, width), k in sorted(phv_use(phv).items()):
        print(f"  {gress} {kind} {width}-bit: {k}")


if __name__ == "__main__":
    main()
