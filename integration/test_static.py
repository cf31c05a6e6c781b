"""The binary runs on any node: it is statically linked.

kubelet and containerd run ebpf-masq on the node itself, whose libc may be
older than the build machine's (RHEL 8, Ubuntu 20.04, Amazon Linux 2, Debian
11 have glibc < 2.34). The ELF asks for no interpreter and no shared library,
and the binary answers CNI VERSION and a bad ADD inside an empty chroot: no
libc, no loader, no /etc, no /proc.
"""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path


PT_INTERP, PT_DYNAMIC, DT_NULL, DT_NEEDED = 3, 2, 0, 1


def elf_facts(path):
    """(interpreter or None, [DT_NEEDED string offsets]) of a little-endian ELF64 file."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a little-endian ELF64 file"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    interp, needed = None, []
    for i in range(phnum):
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == PT_INTERP:
            interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
        elif p_type == PT_DYNAMIC:
            for off in range(p_offset, p_offset + p_filesz, 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                if tag == DT_NULL:
                    break
                if tag == DT_NEEDED:
                    needed.append(val)
    return interp, needed


def test_elf_needs_no_loader_and_no_library(plugin):
    interp, needed = elf_facts(plugin)
    assert interp is None, f"{plugin} asks for the loader {interp}: not static"
    assert needed == [], f"{plugin} needs {len(needed)} shared libraries: not static"


def test_elf_check_sees_a_dynamic_binary():
    """The check itself: a dynamically linked binary of this machine fails it."""
    interp, needed = elf_facts(Path(shutil.which("ip")))
    assert interp and needed, (interp, needed)


def test_runs_in_an_empty_chroot(plugin, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy2(plugin, root / "ebpf-masq")
    assert sorted(os.listdir(root)) == ["ebpf-masq"]
    env = {"CNI_COMMAND": "VERSION", "PATH": "/"}
    p = subprocess.run([shutil.which("chroot"), root, "/ebpf-masq"], input='{"cniVersion":"1.0.0"}', env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p
    out = json.loads(p.stdout)
    assert "1.0.0" in out["supportedVersions"] and out["cniVersion"], out
    # A bad ADD: the error path (serde, the CNI error object) works with no libc around too.
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent", "CNI_IFNAME": "eth0",
           "CNI_PATH": "/", "PATH": "/"}
    conf = {"cniVersion": "1.0.0", "name": "n", "type": "ebpf-masq", "portRange": "9-1"}
    p = subprocess.run([shutil.which("chroot"), root, "/ebpf-masq"], input=json.dumps(conf), env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0, p
    err = json.loads(p.stdout)
    assert err["code"] == 7 and "portRange" in err["msg"], err
