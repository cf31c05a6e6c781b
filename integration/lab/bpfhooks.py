#!/usr/bin/env python3
"""List the BPF programs on one hook of an interface, as an observer independent
of ebpf-masq: the TCX programs (BPF_PROG_QUERY) and the tc filters (`tc filter
show`). Run it inside the netns (nsenter --net=...).

    bpfhooks.py DEV ingress|egress

One line per TCX program, "tcx bpf name NAME id ID", then tc's own output.
"""
import ctypes
import json
import socket
import subprocess
import sys

BPF_PROG_QUERY = 16
BPF_TCX = {"ingress": 46, "egress": 47}
SYS_BPF = 321  # x86_64


class Query(ctypes.Structure):  # union bpf_attr, the BPF_PROG_QUERY member
    _fields_ = [("target_ifindex", ctypes.c_uint32), ("attach_type", ctypes.c_uint32),
                ("query_flags", ctypes.c_uint32), ("attach_flags", ctypes.c_uint32),
                ("prog_ids", ctypes.c_uint64), ("count", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("prog_attach_flags", ctypes.c_uint64), ("link_ids", ctypes.c_uint64),
                ("link_attach_flags", ctypes.c_uint64), ("revision", ctypes.c_uint64)]


def tcx_prog_ids(dev, direction):
    try:
        ifindex = socket.if_nametoindex(dev)
    except OSError:
        return []
    ids = (ctypes.c_uint32 * 64)()
    q = Query(target_ifindex=ifindex, attach_type=BPF_TCX[direction],
              prog_ids=ctypes.addressof(ids), count=64)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(ctypes.c_long(SYS_BPF), ctypes.c_long(BPF_PROG_QUERY), ctypes.byref(q),
                    ctypes.c_ulong(ctypes.sizeof(q))) < 0:
        return []  # no such device / no TCX in this kernel
    return list(ids[:q.count])


def main():
    dev, direction = sys.argv[1], sys.argv[2]
    for pid in tcx_prog_ids(dev, direction):
        p = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(pid)], capture_output=True, text=True)
        name = json.loads(p.stdout).get("name", "?") if p.returncode == 0 else "?"
        print(f"tcx bpf name {name} id {pid}")
    p = subprocess.run(["tc", "filter", "show", "dev", dev, direction], capture_output=True, text=True)
    sys.stdout.write(p.stdout)


if __name__ == "__main__":
    main()
