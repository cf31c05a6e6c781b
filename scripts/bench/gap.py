#!/usr/bin/env python3
"""Busy-loop on the CPU this process is pinned to (taskset) for SECS seconds and
report how long the CPU was taken away from it: every gap of more than 0.25 ms
between two clock reads (and, of those, the ones over 1 ms). A softirq that
runs for a fraction of a millisecond or more (a NAT expiry sweep run) shows up
here on its CPU; ordinary interrupts are a few microseconds.

Usage: gap.py SECS  -> one JSON line: {"secs", "gaps", "gaps_1ms", "max_ms", "sum_ms"}
"""
import json
import sys
import time


def main():
    secs = float(sys.argv[1])
    now = time.perf_counter_ns
    end = now() + int(secs * 1e9)
    last = now()
    gaps = []
    while last < end:
        t = now()
        if t - last > 250_000:
            gaps.append((t - last) / 1e6)
        last = t
    print(json.dumps({"secs": secs, "gaps": len(gaps), "gaps_1ms": sum(g > 1.0 for g in gaps), "max_ms": round(max(gaps, default=0.0), 2),
                      "sum_ms": round(sum(gaps), 2)}))


if __name__ == "__main__":
    main()
