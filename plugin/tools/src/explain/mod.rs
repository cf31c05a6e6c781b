//! `ebpf-masq explain`: the masquerade decision the data plane makes for one
//! packet leaving the node, and why, read from the same pinned maps the
//! programs read (never from a config file). The room: `packet` (what the
//! command line describes), `decide` (the decision walk), `egress_policy` (its egress
//! policy step), `explanation` (what the walk answers), `lookups` (the maps and
//! routes it reads); this file is the command. Reads only, never writes.
//!
//! [`explain`] mirrors `snat_egress` (bpf/lib/nat/egress_tmpl.h, both families) and
//! `masq_decide_v4`/`masq_decide_v6` (bpf/lib/decide.h) step by step; keep them
//! in step. It takes its map lookups through the [`Lookups`] trait, so the
//! decision is unit-tested without maps; [`MapLookups`] answers them from the
//! pins with the kernel's own lookups (LPM tries included) and iterates maps
//! only to *name* what matched (a CIDR, a rule's source, a pod's container ID).
//!
//! Order, as in the data plane:
//!  1. the out interface must be an uplink (`uplinks`), else untouched;
//!  2. the host's own traffic (source == the uplink's masquerade address): untouched;
//!  3. an existing NAT flow for the exact tuple (`nat{4,6}_fwd`) is reused, unless
//!     its reply slot was taken over by another flow; a later fragment follows its
//!     first fragment's flow (`frag{4,6}`);
//!  4. a rule for (out interface, source) whose except list misses the destination;
//!  5. a registered pod (`pods{4,6}`) with natOutgoing whose destination is in no
//!     exclusion (`excl{4,6}`); for a pod egress policies select, the first of them
//!     holding the destination (`policy_dst4`/`policy_dst6`) gives the address (its `masq_pool`
//!     slot 1 + i) or leaves it unmasqueraded (natOutgoing: false) — `egress_policy`;
//!  6. a packet the policy masquerades that cannot be (an ICMP echo reply, a
//!     fragment without state, an unsupported protocol, no port range) is dropped.
//!
//! A data plane without IPv6 NAT maps (no `nat6_fwd` pinned) passes IPv6
//! untouched: the decision is still shown, with the verdict "IPv6 masquerade
//! not supported by this data plane version".

use std::path::Path;

use ebpf_masq_core::{bpf::loader::Pins, error::{code, Error, Result}};

// The route lookup lives with the other route code (netlink::route); the old path stays.
pub use ebpf_masq_core::netlink::route_oif;

mod decide;
mod egress_policy;
mod explanation;
mod lookups;
mod packet;

pub use decide::explain;
pub use explanation::{ExclRef, Explanation, FlowRef, PodRef, RuleRef, Verdict, Why};
pub use egress_policy::{PolicyReason, PolicyRef};
pub use lookups::{prefix_match, resolve_out, Lookups, MapLookups, PodDesc, RuleDesc, RuleHit};
pub use packet::{
    ExplainArgs, OutIf, Packet, Proto, ICMPV6_ECHO_REPLY, ICMPV6_ECHO_REQUEST, ICMP_ECHO, ICMP_ECHOREPLY, IPPROTO_ICMP,
    IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP,
};

// ---------------------------------------------------------------------------
// the command

pub const LONG_HELP: &str = "Explain what the data plane does to one packet leaving the node: masqueraded \
(to which address, by which rule, pod registration or egress policy), untouched or dropped, and why, step by step.\n\n\
It reads the same pinned maps the BPF programs read (uplinks, rules, pods, exclusions, NAT flows), never a \
config file, and mirrors their order exactly. Run it in the node's network namespace: the out interface is \
--out, else the interface of the node's route to --dst, else the node's only uplink.\n\n\
With --sport and --dport (ICMP echo: the identifier as --sport) an existing NAT flow for that exact tuple is \
looked up first, as the data plane does.";

pub fn main(args: &ExplainArgs) -> Result<()> {
    run(&args.pins.pin_path, &args.packet(), args.out.as_deref(), args.json)
}

pub fn run(pin_path: &Path, pkt: &Packet, out: Option<&str>, json: bool) -> Result<()> {
    if pkt.src.is_ipv4() != pkt.dst.is_ipv4() {
        return Err(Error::new(code::INVALID_CONFIG, "--src and --dst must be of the same address family"));
    }
    let pins = Pins::new(pin_path);
    let l = MapLookups::pinned(&pins)?;
    let out = resolve_out(&l, out, pkt.dst)?;
    let x = explain(&l, pkt, &out)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&x).expect("serializable"));
        return Ok(());
    }
    println!("packet:  {} out {} (ifindex {}, chosen by {})", x.packet, out.label(), out.ifindex, out.chosen_by);
    let v = match x.verdict {
        Verdict::Masquerade => format!(
            "MASQUERADE to {}{}",
            x.address.as_deref().unwrap_or("?"),
            x.port.map(|p| format!(":{p}")).unwrap_or_default()
        ),
        Verdict::Untouched => "UNTOUCHED (leaves with its own source)".into(),
        Verdict::Drop => "DROP".into(),
    };
    println!("verdict: {v}");
    println!("why:     {}", x.reason);
    println!("checks:");
    for (i, s) in x.trace.iter().enumerate() {
        println!("  {}. {s}", i + 1);
    }
    if !x.policies.is_empty() {
        println!("egress policies:");
        for p in &x.policies {
            println!("  {} \"{}\": {}", if p.matched { "*" } else { "-" }, p.policy, p.reason);
        }
    }
    if !x.notes.is_empty() {
        println!("notes:");
        for n in &x.notes {
            println!("  - {n}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fake_tests;

#[cfg(test)]
mod egress_policy_tests;
