"""The data plane's map values as the tests read them with bpftool: decoded by the
layout the loaded programs' own BTF gives (bpftool -j btf dump id N, N a pinned
map's btf_id), never by byte offsets copied into the tests. Struct members are
named by path ("l2.l3_ifindex"); the headers (bpf/include/) stay the only place
that spells a layout out (Rust's view is generated from them). It imports no other lab
module: netlab and masqcli take LAYOUT from here.
"""

import json
from pathlib import Path

# The pin layout version (<pinPath>/v<LAYOUT>/), read from the ABI header itself.
LAYOUT = int(next(line.split()[2] for line in
                  (Path(__file__).resolve().parents[2] / "bpf/include/masq_abi.h").read_text().splitlines()
                  if line.startswith("#define MASQ_LAYOUT_VERSION ")))

# Fields kept in network byte order in the maps (struct comments in masq_abi.h: __be16/__be32).
BIG_ENDIAN = {"port", "sport", "dport"}


class Btf:
    """The BTF types of the programs (one pinned map's btf_id names them all)."""

    def __init__(self, node, pinned_map):
        info = json.loads(node.enter(["bpftool", "-j", "map", "show", "pinned", pinned_map]).stdout)
        dump = json.loads(node.enter(["bpftool", "-j", "btf", "dump", "id", str(info["btf_id"])]).stdout)
        self.types = {t["id"]: t for t in dump["types"]}
        self.structs = {t["name"]: t for t in dump["types"] if t["kind"] == "STRUCT" and t.get("name")}

    def _resolve(self, type_id):
        t = self.types[type_id]
        while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT"):
            t = self.types[t["type_id"]]
        return t

    def size(self, type_id):
        t = self._resolve(type_id)
        if t["kind"] in ("INT", "STRUCT", "UNION", "ENUM"):
            return t["size"]
        if t["kind"] == "ARRAY":
            return t["nr_elems"] * self.size(t["type_id"])
        raise ValueError(f"no size for BTF kind {t['kind']}")

    def member(self, struct, path):
        """(byte offset, byte size) of `path` ("a.b") inside `struct`."""
        t, off = self.structs[struct], 0
        for part in path.split("."):
            [m] = [m for m in t["members"] if m["name"] == part]
            assert m["bits_offset"] % 8 == 0, (struct, path)
            off += m["bits_offset"] // 8
            size = self.size(m["type_id"])
            t = self._resolve(m["type_id"])
        return off, size

    def field(self, struct, path, raw):
        """The value of `path` in the bytes `raw` of a `struct`: an int (network byte
        order for the port fields), or the bytes of an array."""
        off, size = self.member(struct, path)
        b = bytes(raw[off:off + size])
        name = path.rsplit(".", 1)[-1]
        t = self.structs[struct]
        for part in path.split(".")[:-1]:
            [m] = [m for m in t["members"] if m["name"] == part]
            t = self._resolve(m["type_id"])
        [m] = [m for m in t["members"] if m["name"] == name]
        if self._resolve(m["type_id"])["kind"] == "ARRAY":
            return b
        return int.from_bytes(b, "big" if name in BIG_ENDIAN else "little")


    def pack(self, struct, **values):
        """The bytes of a `struct` with the given integer members (little-endian, the
        rest zero), e.g. pack("port_range", lo=1024, hi=29999)."""
        out = bytearray(self.structs[struct]["size"])
        for path, v in values.items():
            off, size = self.member(struct, path)
            out[off:off + size] = v.to_bytes(size, "big" if path in BIG_ENDIAN else "little")
        return bytes(out)

    def addr(self, struct, path, raw):
        """An IPv4 member (network order in the maps) as dotted text."""
        off, size = self.member(struct, path)
        assert size == 4, (struct, path, size)
        return ".".join(map(str, raw[off:off + 4]))


def btf_of(topo, layout=None):
    """The programs' BTF, from the node's pinned node_config map (of `layout`, default the current)."""
    return Btf(topo.node, f"{topo.lab.pin_path}/v{layout or LAYOUT}/maps/node_config")


def hexes(b):
    """bytes as bpftool's "hex" arguments."""
    return [f"{x:02x}" for x in b]


def raw(hexes):
    """bpftool's ["0x0a", ...] as bytes."""
    return bytes(int(b, 16) for b in hexes)
