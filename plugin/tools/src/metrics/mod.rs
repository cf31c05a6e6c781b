//! `ebpf-masq metrics`: the data plane's counters in the Prometheus text
//! exposition format (version 0.0.4), read from the pinned maps.
//!
//! Printed once (for node-exporter's textfile collector:
//! `ebpf-masq metrics > f.prom.$$ && mv f.prom.$$ /var/lib/node_exporter/ebpf_masq.prom`)
//! or served on `GET /metrics` by tiny_http (`--listen ADDR`).
//!
//! Each scrape reads the maps anew into a [`Snapshot`]; prometheus-client's
//! registry encodes it through one [`Collector`] (const metrics: nothing is kept
//! between scrapes) with its 0.0.4 text encoder, not the OpenMetrics one: the
//! textfile collector reads only 0.0.4, and there counters are `…_total` on the
//! HELP and TYPE lines too, with no `# EOF`.

use std::{fmt, io::Write};

use prometheus_client::{
    collector::Collector,
    encoding::{prometheus_text, DescriptorEncoder, EncodeGaugeValue, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge, MetricType},
    registry::Registry,
};

use ebpf_masq_core::{bpf::{abi, events, loader::Pins}, error::{code, Error, Result}};
use crate::readers::{self, PodRow, PolicyRow, RuleRow};

/// Everything one scrape reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub loaded: bool,
    /// `counters` by name (abi::counter::NAMES).
    pub counters: Vec<(String, u64)>,
    /// `drops` by reason (abi::drop_reason::NAMES).
    pub drops: Vec<(String, u64)>,
    /// (family, entries, max entries) of each pinned NAT map (forward halves).
    pub nat: Vec<(&'static str, u64, u64)>,
    /// The expiry sweep: runs, pairs checked by the last run, running (not
    /// idle on an empty table), walking the IPv6 map too.
    pub sweep: Sweep,
    pub rules: Vec<RuleRow>,
    pub pods: Vec<PodRow>,
    /// Egress policies with their counters and selected pods.
    pub egress_policies: Vec<PolicyRow>,
    /// The NAT session log's exporter, while it holds its lease: (records written,
    /// records its IPFIX collector did not get), since it started.
    pub natlog: Option<(u64, u64)>,
}

/// The expiry sweep's state, as `metrics` reports it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    pub runs: u64,
    pub cycles: u64,
    pub last_run_ns: u64,
    pub max_run_ns: u64,
    pub last_checked: u64,
    pub armed: bool,
    pub walks_ipv6: bool,
}

impl Snapshot {
    fn counter(&self, name: &str) -> u64 {
        self.counters.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or(0)
    }
    /// The data plane has this counter (newer versions add some).
    fn has(&self, name: &str) -> bool {
        self.counters.iter().any(|(n, _)| n == name)
    }
}

/// Read one snapshot from the pins. A node without a data plane is a valid
/// snapshot (`ebpf_masq_data_plane_loaded 0`), not an error.
pub fn collect(pins: &Pins) -> Result<Snapshot> {
    if !pins.loaded() {
        return Ok(Snapshot::default());
    }
    let mut nat = Vec::new();
    for (family, map) in [("ipv4", abi::MAP_NAT4_REV), ("ipv6", abi::MAP_NAT6_REV)] {
        if let Some((n, max)) = readers::map_fill(pins, map)? {
            nat.push((family, n, max));
        }
    }
    let sweep = readers::nat_gc(pins)?
        .map(|g| Sweep {
            runs: g.runs,
            cycles: g.cycles,
            last_run_ns: g.last_run_took_ns,
            max_run_ns: g.max_run_took_ns,
            last_checked: g.last_cycle_checked,
            armed: g.armed & abi::NAT_GC_ARMED != 0,
            walks_ipv6: g.walk & abi::NAT_GC_WALK6 != 0,
        })
        .unwrap_or_default();
    let mut pods = readers::pods(pins)?;
    pods.sort_by(|a, b| (&a.container_id, &a.ifname).cmp(&(&b.container_id, &b.ifname)));
    let egress_policies = readers::egress_policies(pins, &pods)?;
    let ctl = events::Leases::pinned(pins)?.get();
    let natlog = (ctl.log_until > events::ktime_now()).then_some((ctl.log_records, ctl.log_ipfix_unsent));
    Ok(Snapshot {
        natlog,
        loaded: true,
        counters: readers::counters(pins)?.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
        drops: readers::drops(pins)?.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
        nat,
        sweep,
        rules: readers::rules(pins)?,
        pods,
        egress_policies,
    })
}

/// The exposition text of one snapshot.
pub fn render(s: &Snapshot) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(s.clone())));
    let mut out = String::new();
    // Only the writer can fail, and a String's never does.
    prometheus_text::encode(&mut out, &registry).expect("encoding into a String");
    out
}

/// One scrape's snapshot, encoded family by family in a fixed order.
#[derive(Debug)]
struct Scrape(Snapshot);

impl Collector for Scrape {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        encode_snapshot(&self.0, &mut enc)
    }
}

/// A sample's labels, in the order they are written.
type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One family: HELP, TYPE, then its samples (none is fine: HELP and TYPE alone).
fn family<'a, M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, M)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A counter family. `name` is the name users see; the encoder appends `_total`
/// itself, so the family is declared without it.
fn counters<'a>(enc: &mut DescriptorEncoder, name: &str, help: &str, samples: impl IntoIterator<Item = (Labels<'a>, u64)>) -> fmt::Result {
    let declared = name.strip_suffix("_total").expect("a counter's name ends in _total");
    family(enc, declared, help, MetricType::Counter, samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v))))
}

fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    counters(enc, name, help, [(Labels::new(), v)])
}

fn gauges<'a, N: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, N)>,
) -> fmt::Result {
    family(enc, name, help, MetricType::Gauge, samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v))))
}

fn gauge<N: EncodeGaugeValue>(enc: &mut DescriptorEncoder, name: &str, help: &str, v: N) -> fmt::Result {
    gauges(enc, name, help, [(Labels::new(), v)])
}

fn encode_snapshot(s: &Snapshot, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauge(enc, "ebpf_masq_data_plane_loaded", "1 when the ebpf-masq programs are pinned under the pin path.", s.loaded as u64)?;
    if !s.loaded {
        return Ok(());
    }
    gauges(
        enc,
        "ebpf_masq_pods",
        "Registered pods: by = add (their CNI ADD), found (the agent, from the runtime's CNI cache: their ADD never reached ebpf-masq).",
        [("add", false), ("found", true)].map(|(by, f)| (vec![("by", by)], s.pods.iter().filter(|p| p.found == f).count() as u64)),
    )?;

    let dirs = [("snat", "snat"), ("rnat", "rnat")];
    let fams = [("ipv4", "v4"), ("ipv6", "v6")];
    let by_direction = |what: &str| -> Vec<(Labels, u64)> {
        let mut out = Vec::new();
        for (d, dn) in dirs {
            for (fam, fs) in fams {
                out.push((vec![("direction", d), ("family", fam)], s.counter(&format!("{dn}_{what}_{fs}"))));
            }
        }
        out
    };
    counters(
        enc,
        "ebpf_masq_translated_packets_total",
        "Packets translated: snat = source rewritten on uplink egress, rnat = reply rewritten back on uplink ingress.",
        by_direction("packets"),
    )?;
    counters(enc, "ebpf_masq_translated_bytes_total", "Bytes of the translated packets (skb length).", by_direction("bytes"))?;
    for (name, key, help) in [
        ("ebpf_masq_nat_pairs_created_total", "nat_created", "NAT pairs (forward and reverse half) created."),
        (
            "ebpf_masq_nat_pairs_reclaimed_total",
            "nat_reclaimed",
            "Expired NAT pairs whose port was taken over by a new flow.",
        ),
        (
            "ebpf_masq_nat_pairs_expired_total",
            "nat_expired",
            "Idle NAT pairs removed, both halves together, by their expiry timer.",
        ),
        (
            "ebpf_masq_nat_pairs_finished_reused_total",
            "nat_finished_reused",
            "Finished TCP pairs (both FINs acknowledged at once; a RST once quiet for 2 s) whose port a new \
             flow took over.",
        ),
        (
            "ebpf_masq_nat_pairs_unanswered_reused_total",
            "nat_unanswered_reused",
            "TCP pairs never answered (a SYN lost or unanswered, its client gone) whose port a new flow took \
             over once quiet for 2 s.",
        ),
        (
            "ebpf_masq_filter_admitted_total",
            "filter_admitted",
            "Packets from a new remote let in to a mapping by natFiltering (address-dependent or \
             endpoint-independent); each made a NAT pair.",
        ),
        (
            "ebpf_masq_port_allocation_failures_total",
            "port_alloc_failures",
            "New flows refused for want of a port: every port towards their remote endpoint was held by an \
             unfinished pair (as the endpoint's bitmap says; see docs/nat.md).",
        ),
        (
            "ebpf_masq_port_busy_endpoint_scans_total",
            "nat_hot_scans",
            "Full scans of the port range towards a busy remote endpoint: its port bitmap made (its cheap tries \
             failed) or made again (a search found nothing, at most once a second).",
        ),
        (
            "ebpf_masq_port_busy_endpoint_found_total",
            "nat_hot_found",
            "New flows towards a busy remote endpoint whose port its bitmap found.",
        ),
        (
            "ebpf_masq_events_lost_total",
            "events_lost",
            "Events (pairs made and ended, refusals, drops) not written for a reader: its ring was full.",
        ),
        (
            "ebpf_masq_port_probes_total",
            "port_probes",
            "Ports tried by new flows' port searches, the successful one included: per created pair \
             ~1 / (1 - the share of the port range in use for that remote endpoint).",
        ),
        (
            "ebpf_masq_nat_expiry_arm_failures_total",
            "nat_expiry_arm_failures",
            "Times the NAT expiry sweep's timer could not be armed (the next new pair retries).",
        ),
        (
            "ebpf_masq_inbound_flows_tracked_total",
            "inbound_flows_tracked",
            "Flows begun outside (their first packet came in on an uplink, to a pod or a rule's source) tracked: \
             their packets leave untranslated.",
        ),
        (
            "ebpf_masq_inbound_packets_untranslated_total",
            "inbound_packets_untranslated",
            "Packets of flows begun outside that left by an uplink untranslated.",
        ),
        (
            "ebpf_masq_inbound_flows_untracked_total",
            "inbound_flows_untracked",
            "Flows begun outside that could not be tracked: the NAT table (the flow's shard) was full.",
        ),
        (
            "ebpf_masq_mappings_reused_total",
            "mappings_reused",
            "New flows given the node address and port their pod endpoint already had (endpoint-independent mapping).",
        ),
        (
            "ebpf_masq_ports_preserved_total",
            "ports_preserved",
            "New flows given the pod's own source port (port preservation).",
        ),
        (
            "ebpf_masq_host_flows_tracked_total",
            "host_flows_tracked",
            "Host flows on the masquerade address given a NAT pair: their tuple was a pod's, or an echo request.",
        ),
        (
            "ebpf_masq_host_flows_remapped_total",
            "host_flows_remapped",
            "Host flows given another source port because a pod's NAT pair held their tuple (as netfilter does).",
        ),
        (
            "ebpf_masq_host_socket_ports_avoided_total",
            "host_socket_ports_avoided",
            "Ports a new NAT pair passed over because a host socket (a listener, a bound UDP socket, a host \
             connection on that tuple) would have received its replies.",
        ),
    ] {
        counter(enc, name, help, s.counter(key))?;
    }
    counters(
        enc,
        "ebpf_masq_skipped_packets_total",
        "Pod packets the policy left untouched: destination excluded, or natOutgoing false.",
        [
            (vec![("reason", "destination_excluded")], s.counter("skipped_excluded")),
            (vec![("reason", "nat_outgoing_false")], s.counter("skipped_nat_outgoing_false")),
        ],
    )?;
    if s.has("icmp_errors_to_pods") || s.has("icmp_errors_outward") {
        counters(
            enc,
            "ebpf_masq_icmp_errors_translated_total",
            "ICMP errors translated: to_pod = about a masqueraded flow, sent back to the pod; \
             outward = about a translated reply (from a pod or the node), sent out.",
            [
                (vec![("direction", "to_pod")], s.counter("icmp_errors_to_pods")),
                (vec![("direction", "outward")], s.counter("icmp_errors_outward")),
            ],
        )?;
    }
    if s.has("fragments_translated") {
        counter(
            enc,
            "ebpf_masq_fragments_translated_total",
            "Later fragments translated like their first fragment.",
            s.counter("fragments_translated"),
        )?;
    }

    gauges(
        enc,
        "ebpf_masq_nat_entries",
        "NAT pairs currently in the table (reverse halves: one per pair).",
        fams.map(|(fam, _)| (vec![("family", fam)], s.nat.iter().find(|(x, _, _)| *x == fam).map(|(_, n, _)| *n).unwrap_or(0))),
    )?;
    gauges(
        enc,
        "ebpf_masq_nat_entries_limit",
        "Capacity of the NAT table (natMaxEntries) per family.",
        s.nat.iter().map(|(fam, _, max)| (vec![("family", *fam)], *max)),
    )?;

    counter(enc, "ebpf_masq_nat_expiry_sweeps_total",
            "Runs of the NAT expiry sweep (one bpf_timer per node; a run walks one shard).", s.sweep.runs)?;
    counter(enc, "ebpf_masq_nat_expiry_cycles_total",
            "Complete cycles of the NAT expiry sweep (every shard walked once).", s.sweep.cycles)?;
    gauge(enc, "ebpf_masq_nat_expiry_last_run_seconds",
          "How long the last expiry sweep run held its CPU (one shard walked in softirq).", s.sweep.last_run_ns as f64 / 1e9)?;
    gauge(enc, "ebpf_masq_nat_expiry_max_run_seconds",
          "The longest expiry sweep run since the NAT maps were created.", s.sweep.max_run_ns as f64 / 1e9)?;
    gauge(enc, "ebpf_masq_nat_expiry_last_checked_pairs",
          "NAT pairs the last complete expiry cycle (every shard once) looked at.", s.sweep.last_checked)?;
    gauge(enc, "ebpf_masq_nat_expiry_running",
          "1 while the NAT expiry sweep runs; 0 while it is idle (no pair, or none created yet).", u64::from(s.sweep.armed))?;
    gauge(enc, "ebpf_masq_nat_expiry_walks_ipv6",
          "1 while the sweep cycle walks the IPv6 NAT shards too (IPv6 pairs may exist).", u64::from(s.sweep.walks_ipv6))?;

    gauge(enc, "ebpf_masq_natlog_exporting",
          "1 while a NAT session log exporter holds the events_log lease (agent or `ebpf-masq natlog`).",
          u64::from(s.natlog.is_some()))?;
    if let Some((records, unsent)) = s.natlog {
        counter(enc, "ebpf_masq_natlog_records_total",
                "NAT session log records the exporter wrote (since it started: a restart begins at 0).", records)?;
        counter(enc, "ebpf_masq_natlog_ipfix_unsent_total",
                "Of those, records its IPFIX collector did not get as far as this host can tell (no route, or an \
                 ICMP port unreachable back: collector down); never retried, never waited for.", unsent)?;
    }

    counters(
        enc,
        "ebpf_masq_drops_total",
        "Packets dropped by the data plane, by reason.",
        s.drops.iter().map(|(reason, v)| (vec![("reason", reason.as_str())], *v)),
    )?;

    let rule_labels = |r: &RuleRow| {
        let out_if = r.out_interface.clone().unwrap_or_else(|| format!("ifindex:{}", r.out_ifindex));
        (r.id.to_string(), r.source_cidr(), out_if)
    };
    let rules: Vec<_> = s.rules.iter().map(|r| (rule_labels(r), r.packets, r.bytes)).collect();
    fn labels((id, src, oif): &(String, String, String)) -> Labels<'_> {
        vec![("rule", id), ("source", src), ("out_interface", oif)]
    }
    counters(
        enc,
        "ebpf_masq_rule_packets_total",
        "Packets masqueraded by each masqueradeRules entry.",
        rules.iter().map(|(l, p, _)| (labels(l), *p)),
    )?;
    counters(
        enc,
        "ebpf_masq_rule_bytes_total",
        "Bytes masqueraded by each masqueradeRules entry.",
        rules.iter().map(|(l, _, b)| (labels(l), *b)),
    )?;

    for (name, help, get) in [
        (
            "ebpf_masq_egress_policy_packets_total",
            "Packets of each egress policy's pods to its destinations that took its address.",
            (|p: &PolicyRow| p.packets) as fn(&PolicyRow) -> u64,
        ),
        ("ebpf_masq_egress_policy_bytes_total", "Bytes of the packets that took each egress policy's address.", |p: &PolicyRow| {
            p.bytes
        }),
        ("ebpf_masq_egress_policy_flows_total", "NAT pairs made with each egress policy's address.", |p: &PolicyRow| p.flows),
        (
            "ebpf_masq_egress_policy_unmasqueraded_packets_total",
            "Packets each natOutgoing:false egress policy left unmasqueraded.",
            |p: &PolicyRow| p.unmasqueraded,
        ),
    ] {
        counters(enc, name, help, s.egress_policies.iter().map(|p| (vec![("policy", p.desc.name.as_str())], get(p))))?;
    }
    gauges(
        enc,
        "ebpf_masq_egress_policy_pods",
        "Pods each egress policy selects (their policy mask has its bit).",
        s.egress_policies.iter().map(|p| (vec![("policy", p.desc.name.as_str())], p.pods.len() as u64)),
    )?;

    for (name, help, get) in [
        (
            "ebpf_masq_pod_packets_total",
            "Packets from each pod interface accepted by the veth source check.",
            (|p: &PodRow| p.packets) as fn(&PodRow) -> u64,
        ),
        ("ebpf_masq_pod_bytes_total", "Bytes from each pod interface accepted by the veth source check.", |p: &PodRow| p.bytes),
        (
            "ebpf_masq_pod_spoofed_packets_total",
            "Packets from each pod interface dropped because their source is not the pod's.",
            |p: &PodRow| p.spoofed,
        ),
    ] {
        counters(
            enc,
            name,
            help,
            s.pods.iter().map(|p| (pod_labels(p).to_vec(), get(p))),
        )?;
    }
    counters(
        enc,
        "ebpf_masq_pod_port_refusals_total",
        "New flows from each pod refused: no_port = no port free towards the remote endpoint, \
         over_share = over the pod's share of a busy endpoint's ports, over_limit = at the pod's port limit \
         towards the endpoint (RFC 6888 REQ-4).",
        s.pods.iter().flat_map(|p| {
            let who = pod_labels(p);
            [("no_port", p.refused_no_port), ("over_share", p.refused_over_share), ("over_limit", p.refused_over_limit)]
                .map(|(why, n)| ([&who[..], &[("reason", why)][..]].concat(), n))
        }),
    )?;
    Ok(())
}

/// A pod interface's labels: its registration's container ID and interface, then
/// the Kubernetes namespace and name its ADD was given (CNI_ARGS K8S_POD_NAMESPACE,
/// K8S_POD_NAME; empty strings for a pod without them).
fn pod_labels(p: &PodRow) -> [(&'static str, &str); 4] {
    [
        ("container_id", p.container_id.as_str()),
        ("ifname", p.ifname.as_str()),
        ("namespace", p.k8s_namespace.as_str()),
        ("pod", p.k8s_name.as_str()),
    ]
}

/// What `GET /metrics` answers: the one-shot text's content type, 0.0.4.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;
const TEXT: &str = "text/plain; charset=utf-8";

/// An HTTP response before tiny_http writes it.
#[derive(Debug, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// 405: say which methods are allowed.
    pub allow: bool,
}

fn plain(status: u16, body: impl Into<String>) -> Reply {
    Reply { status, content_type: TEXT, body: body.into(), allow: false }
}

/// The answer to one request; `metrics` is called only for `GET /metrics`
/// (or HEAD: tiny_http leaves the body out). The query string is ignored.
pub fn respond(method: &tiny_http::Method, url: &str, metrics: impl FnOnce() -> Result<String>) -> Reply {
    if !matches!(method, tiny_http::Method::Get | tiny_http::Method::Head) {
        return Reply { allow: true, ..plain(405, "only GET and HEAD\n") };
    }
    if url.split(['?', '#']).next() != Some("/metrics") {
        return plain(404, "not found: try /metrics\n");
    }
    match metrics() {
        Ok(body) => Reply { status: 200, content_type: CONTENT_TYPE, body, allow: false },
        Err(e) => plain(500, format!("ebpf-masq: {}\n", e.msg)),
    }
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

/// Answer one request from a fresh snapshot.
fn handle(pins: &Pins, req: tiny_http::Request) -> std::io::Result<()> {
    let r = respond(req.method(), req.url(), || collect(pins).map(|snap| render(&snap)));
    let mut resp = tiny_http::Response::from_string(r.body)
        .with_status_code(r.status)
        .with_header(header("Content-Type", r.content_type))
        // Content-Length, never chunked, whatever the size (as before tiny_http).
        .with_chunked_threshold(usize::MAX);
    if r.allow {
        resp = resp.with_header(header("Allow", "GET, HEAD"));
    }
    req.respond(resp)
}

/// Bind `addr`: a numeric address only, as the binary is static and glibc's
/// getaddrinfo would need the node's own NSS libraries for a name.
fn bind(addr: &str) -> Result<tiny_http::Server> {
    let sock: std::net::SocketAddr = addr.parse().map_err(|_| {
        Error::new(code::INVALID_CONFIG, format!("--listen {addr:?}: expected a numeric ADDR:PORT, e.g. 127.0.0.1:9437 or [::]:9437"))
    })?;
    tiny_http::Server::http(sock).map_err(|e| Error::new(code::IO_FAILURE, format!("listen on {addr}: {e}")))
}

/// Serve `GET /metrics` on `addr` until killed; one request answered at a time
/// (tiny_http reads each connection's request in a thread of its own).
pub fn serve(pins: &Pins, addr: &str) -> Result<()> {
    let server = bind(addr)?;
    let local = server.server_addr().to_ip().map_or_else(|| addr.to_string(), |a| a.to_string());
    eprintln!("ebpf-masq metrics: serving http://{local}/metrics");
    for req in server.incoming_requests() {
        if let Err(e) = handle(pins, req) {
            eprintln!("ebpf-masq metrics: connection: {e}");
        }
    }
    Ok(())
}
pub const LONG_HELP: &str = "The data plane's counters in the Prometheus text exposition format (0.0.4): \
packets/bytes translated per direction and family, NAT pairs created/reclaimed/expired, NAT entries, port \
allocation failures, drops by reason, per-rule, per-egress-policy and per-pod counters. Read from the pinned maps.\n\n\
Without --listen it prints once, for node-exporter's textfile collector:\n  \
ebpf-masq metrics > /var/lib/node_exporter/textfile/ebpf_masq.prom.$$ && \
mv /var/lib/node_exporter/textfile/ebpf_masq.prom.$$ /var/lib/node_exporter/textfile/ebpf_masq.prom\n\
With --listen ADDR (e.g. 127.0.0.1:9437) it serves the same on GET /metrics until killed. On a node that runs \
the agent, 9436 is taken: the agent serves these metrics there already (--metrics-listen).";

#[derive(clap::Args, Debug, Clone)]
pub struct MetricsArgs {
    #[command(flatten)]
    pub pins: super::PinPathArg,
    #[arg(long, value_name = "ADDR", help = "serve GET /metrics on ADDR (host:port) instead of printing once")]
    pub listen: Option<String>,
}

pub fn main(args: &MetricsArgs) -> Result<()> {
    run(&args.pins.pins(), args.listen.as_deref())
}

pub fn run(pins: &Pins, listen: Option<&str>) -> Result<()> {
    match listen {
        Some(addr) => serve(pins, addr),
        None => {
            let text = render(&collect(pins)?);
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes()).and_then(|_| out.flush()).map_err(|e| Error::new(code::IO_FAILURE, format!("stdout: {e}")))
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod dashboard_tests;
