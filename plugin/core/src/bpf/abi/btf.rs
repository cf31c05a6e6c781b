//! Test-only reader of the `.BTF` section of the compiled BPF objects (ELF64,
//! little-endian bpfel): each struct's size and member offsets and each map
//! definition's `__uint` fields, so the mirror's tests can hold abi.rs against
//! what clang actually laid out. Reads bytes only; touches nothing else.

use std::collections::BTreeMap;

/// A struct member: its name, type id and offset in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub ty: u32,
    pub offset: u32,
}

/// The kinds the checks read; the rest are skipped over.
#[derive(Debug)]
enum Kind {
    Struct { size: u32, members: Vec<Member> },
    Ptr(u32),
    Array { nelems: u32 },
    Var(u32),
    DataSec(Vec<u32>),
    Other,
}

#[derive(Debug)]
struct Type {
    name: String,
    kind: Kind,
}

/// The types of one object, indexed by type id (0 is void).
pub struct Btf {
    types: Vec<Type>,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> usize {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize
}

/// The bytes of ELF section `want`.
fn section<'a>(elf: &'a [u8], want: &str) -> &'a [u8] {
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "not a little-endian ELF64 object");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(elf, 0x28), u16_at(elf, 0x3a) as usize, u16_at(elf, 0x3c) as usize, u16_at(elf, 0x3e) as usize);
    let sh = |i: usize| {
        let h = shoff + i * shentsize;
        (u32_at(elf, h) as usize, u64_at(elf, h + 0x18), u64_at(elf, h + 0x20))
    };
    let (_, names, _) = sh(shstrndx);
    (0..shnum)
        .map(sh)
        .find(|&(name, _, _)| cstr(&elf[names + name..]) == want)
        .map(|(_, off, size)| &elf[off..off + size])
        .unwrap_or_else(|| panic!("no {want} section"))
}

fn cstr(b: &[u8]) -> String {
    String::from_utf8(b[..b.iter().position(|&c| c == 0).unwrap()].to_vec()).unwrap()
}

impl Btf {
    /// The `.BTF` section of `elf` (see the kernel's Documentation/bpf/btf.rst).
    pub fn of_object(elf: &[u8]) -> Btf {
        let b = section(elf, ".BTF");
        assert_eq!(u16_at(b, 0), 0xeb9f, "BTF magic");
        let hdr = u32_at(b, 4) as usize;
        let (type_off, type_len) = (hdr + u32_at(b, 8) as usize, u32_at(b, 12) as usize);
        let strs = &b[hdr + u32_at(b, 16) as usize..][..u32_at(b, 20) as usize];
        let t = &b[type_off..type_off + type_len];
        let name = |off: u32| cstr(&strs[off as usize..]);
        let mut types = vec![Type { name: String::new(), kind: Kind::Other }];
        let mut pos = 0;
        while pos < t.len() {
            let (name_off, info, size_or_type) = (u32_at(t, pos), u32_at(t, pos + 4), u32_at(t, pos + 8));
            pos += 12;
            let (vlen, kind, kind_flag) = ((info & 0xffff) as usize, (info >> 24) & 0x1f, info >> 31 == 1);
            let kind = match kind {
                2 => Kind::Ptr(size_or_type),
                3 => {
                    pos += 12;
                    Kind::Array { nelems: u32_at(t, pos - 4) }
                }
                4 | 5 => {
                    let members = (0..vlen)
                        .map(|i| {
                            let m = pos + 12 * i;
                            // With kind_flag the top 8 bits are a bitfield's size.
                            let bits = u32_at(t, m + 8) & if kind_flag { 0xff_ffff } else { u32::MAX };
                            assert_eq!(bits % 8, 0, "bitfield in {}", name(name_off));
                            Member { name: name(u32_at(t, m)), ty: u32_at(t, m + 4), offset: bits / 8 }
                        })
                        .collect();
                    pos += 12 * vlen;
                    if kind == 4 { Kind::Struct { size: size_or_type, members } } else { Kind::Other }
                }
                14 => {
                    pos += 4;
                    Kind::Var(size_or_type)
                }
                15 => {
                    let vars = (0..vlen).map(|i| u32_at(t, pos + 12 * i)).collect();
                    pos += 12 * vlen;
                    Kind::DataSec(vars)
                }
                // int, decl_tag: 4 bytes more; enum, func_proto: 8 a member; enum64: 12.
                1 | 17 => {
                    pos += 4;
                    Kind::Other
                }
                6 | 13 => {
                    pos += 8 * vlen;
                    Kind::Other
                }
                19 => {
                    pos += 12 * vlen;
                    Kind::Other
                }
                7..=12 | 16 | 18 => Kind::Other,
                k => panic!("unknown BTF kind {k}"),
            };
            types.push(Type { name: name(name_off), kind });
        }
        Btf { types }
    }

    /// Every named struct: name -> (size, members).
    pub fn structs(&self) -> BTreeMap<String, (u32, Vec<Member>)> {
        self.types
            .iter()
            .filter(|t| !t.name.is_empty())
            .filter_map(|t| match &t.kind {
                Kind::Struct { size, members } => Some((t.name.clone(), (*size, members.clone()))),
                _ => None,
            })
            .collect()
    }

    /// The variables of data section `sec` (".maps": the map definitions), by name.
    pub fn vars(&self, sec: &str) -> Vec<String> {
        self.types
            .iter()
            .filter(|t| t.name == sec)
            .flat_map(|t| match &t.kind {
                Kind::DataSec(vars) => vars.clone(),
                _ => vec![],
            })
            .map(|v| self.types[v as usize].name.clone())
            .collect()
    }

    /// `__uint(field, N)` of map definition `map` (declared as `int (*field)[N]`).
    pub fn map_uint(&self, map: &str, field: &str) -> Option<u32> {
        let var = self.types.iter().find(|t| t.name == map && matches!(t.kind, Kind::Var(_)))?;
        let Kind::Var(def) = var.kind else { unreachable!() };
        let Kind::Struct { members, .. } = &self.types[def as usize].kind else { return None };
        let m = members.iter().find(|m| m.name == field)?;
        let Kind::Ptr(arr) = self.types[m.ty as usize].kind else { return None };
        match self.types[arr as usize].kind {
            Kind::Array { nelems } => Some(nelems),
            _ => None,
        }
    }
}
