"""A kernel without TCX, as the plugin sees it: a seccomp filter on the
process (inherited by everything it executes) that answers the bpf() commands
TCX needs the way a kernel before 6.6 does.

Before 6.6 the kernel has no BPF_TCX_INGRESS/EGRESS attach types, so
BPF_LINK_CREATE and BPF_PROG_QUERY with them fail with EINVAL. A seccomp
filter cannot look into the bpf_attr they point to, so every BPF_LINK_CREATE
and BPF_PROG_QUERY fails here; ebpf-masq uses them only for TCX (aya's
feature probes that also use BPF_LINK_CREATE take EINVAL as "unsupported").
Everything else (program loads, maps, pins, netlink tc filters) is the real
kernel's.

Use: subprocess.run(..., preexec_fn=without_tcx), e.g. CniNet.preexec.
"""
import ctypes
import errno
import platform
import struct

# linux/filter.h, linux/seccomp.h, linux/audit.h, linux/bpf.h, asm/unistd.h
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
BPF_PROG_QUERY = 16
BPF_LINK_CREATE = 28
ARCHES = {  # machine: (AUDIT_ARCH_*, __NR_bpf)
    "x86_64": (0xC000003E, 321),
    "aarch64": (0xC00000B7, 280),
}
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16


def _insn(code, jt, jf, k):
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program():
    """The classic-BPF seccomp program, as bytes (struct sock_filter[])."""
    arch, nr_bpf = ARCHES[platform.machine()]
    einval = SECCOMP_RET_ERRNO | errno.EINVAL
    return b"".join([
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARCH),
        _insn(BPF_JEQ_K, 0, 6, arch),             # another ABI: allow
        _insn(BPF_LD_W_ABS, 0, 0, OFF_NR),
        _insn(BPF_JEQ_K, 0, 4, nr_bpf),           # not bpf(): allow
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARG0),      # the command (low word; it is an int)
        _insn(BPF_JEQ_K, 1, 0, BPF_LINK_CREATE),
        _insn(BPF_JEQ_K, 0, 1, BPF_PROG_QUERY),
        _insn(BPF_RET_K, 0, 0, einval),
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ])


def without_tcx():
    """preexec_fn: install the filter in the child before it executes anything."""
    libc = ctypes.CDLL(None, use_errno=True)
    prog = filter_program()
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
