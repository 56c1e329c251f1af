#!/usr/bin/env python3
"""Prints the resources a bf-p4c compile of p4/tna uses, from the compiler's
own reports: pipe/logs/resources.json (MAU stages, memories, ALUs) and
pipe/logs/phv.json (PHV containers).

    p4/resources.py p4/build/tna

One row per MAU stage, then the totals against what the device has, as
the report gives each stage's units. p4/build.sh
tna runs it after a compile; p4/README.md ("TNA resources") records its
output.
"""

import json
import sys
from pathlib import Path


# Each resource: its key in a stage of resources.json, the list of units
# in use under it, and how the stage's capacity is given there.
RESOURCES = {
    "sram": ("rams", "srams", ("nColumns", "nRows")),
    "tcam": ("tcams", "tcams", ("nColumns", "nRows")),
    "map_ram": ("map_rams", "maprams", ("nRows", "nUnits")),
    "salu": ("meter_alus", "meters", ("nAlus",)),
    "stats_alu": ("statistic_alus", "stats", ("nAlus",)),
    "gateway": ("gateways", "gateways", ("nRows", "nUnits")),
}


def capacity(entry, dims):
    """A stage's units of one resource: the product of its dimensions."""
    n = 1
    for d in dims:
        n *= entry.get(d, 0)
    return n


def stage_row(stage):
    """Units used and available, per resource, in one stage."""
    row = {"stage": stage["stage_number"]}
    for name, (key, inner, dims) in RESOURCES.items():
        entry = stage.get(key, {})
        row[name] = (len(entry.get(inner, [])), capacity(entry, dims))
    tables = stage["logical_tables"]
    row["logical_table"] = (len(tables["ids"]), tables["size"])
    return row


def phv_use(phv):
    """Containers used, by gress, kind and width."""
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
    try:
        stages = [stage_row(s) for s in res["mau"]["mau_stages"]]
        n = res["mau"]["nStages"]
        containers = phv_use(phv)
    except (KeyError, TypeError) as e:
        sys.exit(f"resources.py: the report in {logs} lacks {e}")
    if not stages:
        sys.exit(f"resources.py: the report in {logs} lists no MAU stage")
    cols = ["stage", *RESOURCES, "logical_table"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---:|" * len(cols))
    for row in stages:
        cells = [str(row["stage"])] + [str(row[c][0]) for c in cols[1:]]
        print("| " + " | ".join(cells) + " |")
    # n: the device's stages (the report lists only those the program
    # uses); every stage has the same units.
    busy = sum(1 for r in stages if r["logical_table"][0] > 0)
    print(f"\nstages with tables: {busy} of {n}")
    for c in cols[1:]:
        used = sum(r[c][0] for r in stages)
        per_stage = stages[0][c][1]
        print(f"{c}: {used} of {per_stage * n} ({per_stage} per stage)")
    print("\nPHV containers used (gress, kind, width: count):")
    for (gress, kind, width), k in sorted(containers.items()):
        print(f"  {gress} {kind} {width}-bit: {k}")


if __name__ == "__main__":
    main()
