//! `ebpf-masq manifest`: the Kubernetes objects that put ebpf-masq on every
//! node, printed for `kubectl apply -f -`. Its output with no options is
//! `conf/daemonset.yaml` (a test keeps the two equal).
//!
//! The objects are built as `serde_json::Value`s and written by `yaml` with
//! their comments; the ConfigMap's plugin entry is validated by the plugin's own
//! parser before anything is printed. Pure but for reading --conf and
//! --ip-masq-agent-file: `render` is what the tests call. May use config, error.

mod node;
mod objects;
mod uninstall;
mod yaml;

pub use node::PRESETS_HELP;

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{json, Map, Value};

use ebpf_masq_core::{config::{self, DEFAULT_PIN_PATH, PLUGIN_TYPE}, error::{code, Context, Error, Result}};

use node::{node_dirs, NodeDirs};
use objects::{daemonset, namespace, priority_quota, service, service_monitor};
use yaml::Doc;

/// Where the DaemonSet mounts the node's bpffs: pinPath must lie under it.
const BPFFS: &str = "/sys/fs/bpf";
/// Where the agent's container finds the ConfigMap's entry.
const CONFIG_DIR: &str = "/config";
const CONFIG_KEY: &str = "ebpf-masq.json";
/// Where ip-masq-agent and Cilium mount ip-masq-agent's ConfigMap (its key `config`
/// as the file `ip-masq-agent`): the agent's default `--ip-masq-agent-config`.
const IP_MASQ_AGENT_DIR: &str = "/etc/config";
const IP_MASQ_AGENT_KEY: &str = "config";
/// A JSON line of the ConfigMap's entry longer than this is broken up.
const JSON_WIDTH: usize = 100;
const NAME_LABEL: &str = "app.kubernetes.io/name";
/// natLog.file's name under --natlog-dir when the entry names none.
const NATLOG_FILE: &str = "nat.json";

pub const LONG_HELP: &str = "\
Print the Kubernetes objects that put ebpf-masq on every node, for
`ebpf-masq manifest [OPTIONS] | kubectl apply -f -`, in this order:

 - Namespace (left out for kube-system and with --existing-namespace) and
   ServiceAccount;
 - ConfigMap <name>-config: the ebpf-masq plugin entry the agent chains into
   each node's conflist. From --conf FILE (a conflist holding an ebpf-masq
   entry, or one plugin config, with or without cniVersion and name), else
   natOutgoing true, nativeRoutingCIDR 10.244.0.0/16; then --nat-outgoing,
   --native-routing-cidr, ... and --set KEY=VALUE replace keys of it. The entry
   is validated as the plugin validates it: a bad key is an error naming it,
   and nothing is printed;
 - with --ip-masq-agent-file, ConfigMap ip-masq-agent holding that file;
 - outside kube-system, ResourceQuota <name>-critical-pods: it admits the
   pods' priority class, system-node-critical, in the namespace (clusters that
   limit the critical classes, as GKE does, admit them only where such a quota
   exists; Calico's operator does the same for calico-node). It sets no limit.
   With --priority-class NAME (a PriorityClass of your own) it is left out;
 - DaemonSet: one privileged `ebpf-masq agent` per node (every taint
   tolerated, host network, system-node-critical), probes on GET /healthz,
   resource requests and limits, hostPath mounts of the node's CNI plugin and
   config directories (/opt/cni/bin and /etc/cni/net.d, or --preset's, or
   --cni-bin-dir and --cni-conf-dir), libcni's cache (/var/lib/cni,
   read-only) and /sys/fs/bpf; with --ip-masq-agent, ip-masq-agent's
   ConfigMap mounted at /etc/config (optional: absent, its defaults apply) and
   `--ip-masq-agent` passed to the agent; with --natlog-dir DIR, DIR mounted
   at DIR for the NAT log (natLog.file defaults to DIR/nat.json; a natLog.file
   outside DIR, or without --natlog-dir, is an error: it would be lost with
   the pod);
 - with --metrics-service or --service-monitor, a headless Service on the
   metrics port; with --service-monitor, a ServiceMonitor (Prometheus
   Operator, monitoring.coreos.com/v1) scraping it.

ConfigMap volumes are namespaced: ip-masq-agent's own ConfigMap lives in
kube-system, so --ip-masq-agent in another namespace is an error: use
--namespace kube-system, or ship a copy with --ip-masq-agent-file FILE.

With --uninstall it prints, for the same options, what takes ebpf-masq off
every node instead: a DaemonSet <name>-uninstall running `ebpf-masq agent
--uninstall` (entry, binary, programs and pins removed; ready once the node is
clean; see `ebpf-masq agent --help`) and its ServiceAccount. The order:

  kubectl -n NS delete daemonset ebpf-masq --cascade=foreground
  ebpf-masq manifest OPTIONS --uninstall | kubectl apply -f -
  kubectl -n NS rollout status daemonset ebpf-masq-uninstall
  ebpf-masq manifest OPTIONS --uninstall | kubectl delete --ignore-not-found -f -
  ebpf-masq manifest OPTIONS | kubectl delete --ignore-not-found -f -

An agent still running holds off while the uninstaller runs on its node, but
delete its DaemonSet first all the same: once the uninstaller is gone, an
agent would put ebpf-masq back.

The output is deterministic; conf/daemonset.yaml is the output with no
options (`ebpf-masq manifest > conf/daemonset.yaml` regenerates it).";

#[derive(Args, Debug)]
pub struct ManifestArgs {
    #[arg(long, default_value = "ebpf-masq", help = "namespace of every object")]
    pub namespace: String,
    #[arg(long, help = "leave the Namespace object out (it exists already)")]
    pub existing_namespace: bool,
    #[arg(long, default_value = "ebpf-masq",
          help = "name of the DaemonSet, ServiceAccount and ServiceMonitor, and the app.kubernetes.io/name label \
                  (ConfigMap <name>-config, Service <name>-metrics)")]
    pub name: String,
    #[arg(long, help = concat!("the container image [default: localhost/ebpf-masq:", env!("CARGO_PKG_VERSION"), "]"))]
    pub image: Option<String>,
    #[arg(long, default_value = "IfNotPresent", value_parser = ["Always", "IfNotPresent", "Never"])]
    pub image_pull_policy: String,

    #[arg(long, value_enum, help = "the node directories of a distribution (listed below); the flags after win")]
    pub preset: Option<node::Preset>,
    #[arg(long, value_name = "DIR", help = "the node's CNI plugin directory [default: /opt/cni/bin, or the preset's]")]
    pub cni_bin_dir: Option<String>,
    #[arg(long, value_name = "DIR",
          help = "the node's CNI network config directory [default: /etc/cni/net.d, or the preset's]")]
    pub cni_conf_dir: Option<String>,
    #[arg(long, value_name = "DIR",
          help = "libcni's cache directory on the node, mounted read-only [default: /var/lib/cni]")]
    pub cni_cache_dir: Option<String>,
    #[arg(long, value_name = "DIR",
          help = "mount this node directory (same path) for the NAT log's files; natLog.file defaults to DIR/nat.json")]
    pub natlog_dir: Option<String>,
    #[arg(long, value_name = "NAME",
          help = "priorityClassName of the pods [default: system-node-critical, with a ResourceQuota admitting it \
                  outside kube-system]")]
    pub priority_class: Option<String>,
    #[arg(long, help = "print the objects that take ebpf-masq off every node instead (README \"On a cluster\")")]
    pub uninstall: bool,

    #[arg(long, value_name = "FILE",
          help = "the plugin entry: a conflist holding an ebpf-masq entry, or one ebpf-masq plugin config")]
    pub conf: Option<PathBuf>,
    #[arg(long, conflicts_with = "no_nat_outgoing", help = "set natOutgoing true")]
    pub nat_outgoing: bool,
    #[arg(long, help = "set natOutgoing false")]
    pub no_nat_outgoing: bool,
    #[arg(long, value_name = "CIDR", help = "set nativeRoutingCIDR (repeatable): the pod CIDR(s)")]
    pub native_routing_cidr: Vec<String>,
    #[arg(long, value_name = "CIDR", help = "set nonMasqueradeCIDRs (repeatable)")]
    pub non_masquerade_cidr: Vec<String>,
    #[arg(long, value_name = "IFACE", help = "set egressInterfaces (repeatable)")]
    pub egress_interface: Vec<String>,
    #[arg(long, value_name = "ADDR", help = "set masqueradeAddress (repeatable: a pool)")]
    pub masquerade_address: Vec<String>,
    #[arg(long = "set", value_name = "KEY=VALUE",
          help = "set any key of the entry (repeatable); VALUE is JSON, or else a string: \
                  --set fastPath=true --set 'egressPolicies=[...]'")]
    pub set: Vec<String>,

    #[arg(long, help = "mount ip-masq-agent's ConfigMap at /etc/config and run the agent with --ip-masq-agent")]
    pub ip_masq_agent: bool,
    #[arg(long, value_name = "NAME", default_value = "ip-masq-agent",
          help = "name of ip-masq-agent's ConfigMap (in --namespace)")]
    pub ip_masq_agent_configmap: String,
    #[arg(long, value_name = "FILE",
          help = "also emit ip-masq-agent's ConfigMap holding FILE (validated as the agent reads it); \
                  implies --ip-masq-agent")]
    pub ip_masq_agent_file: Option<PathBuf>,
    #[arg(long, help = "run the agent with --ip-masq-agent-all-reserved-ranges; implies --ip-masq-agent")]
    pub ip_masq_agent_all_reserved_ranges: bool,

    #[arg(long, value_name = "PORT", default_value_t = 9436,
          value_parser = clap::value_parser!(u16).range(1..), help = "port of /metrics and /healthz")]
    pub metrics_port: u16,
    #[arg(long, help = "add a headless Service on the metrics port")]
    pub metrics_service: bool,
    #[arg(long, help = "add a Prometheus Operator ServiceMonitor (and the Service)")]
    pub service_monitor: bool,
    #[arg(long, value_name = "KEY=VALUE",
          help = "label of the ServiceMonitor (repeatable), e.g. the one your Prometheus's \
                  serviceMonitorSelector matches")]
    pub service_monitor_label: Vec<String>,

    #[arg(long, value_name = "QUANTITY", default_value = "50m")]
    pub cpu_request: String,
    #[arg(long, value_name = "QUANTITY", default_value = "64Mi")]
    pub memory_request: String,
    #[arg(long, value_name = "QUANTITY", help = "CPU limit [default: none]")]
    pub cpu_limit: Option<String>,
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi",
          help = "memory limit: BPF map memory is charged to the container (at natMaxEntries' default: 355 MiB \
                  with a full IPv4 table, 755 MiB with both families' full)")]
    pub memory_limit: String,
}

impl ManifestArgs {
    fn ip_masq_agent_on(&self) -> bool {
        self.ip_masq_agent || self.ip_masq_agent_file.is_some() || self.ip_masq_agent_all_reserved_ranges
    }
}

pub fn main(a: &ManifestArgs) -> Result<()> {
    let argv: Vec<String> = std::env::args().collect();
    let opts = argv.iter().position(|x| x == "manifest").map_or(&[][..], |i| &argv[i + 1..]);
    let text = render(a, &command_line(opts))?;
    if let Some(file) = &a.ip_masq_agent_file {
        // render() read and accepted it; a key ip-masq-agent ignores is worth a word.
        let parsed = std::fs::read(file).ok().and_then(|b| config::parse_ip_masq_agent(&b, false).ok());
        for k in parsed.map(|f| f.ignored_keys).unwrap_or_default() {
            eprintln!(
                "note: --ip-masq-agent-file {}: key {} is ignored, by ip-masq-agent and by ebpf-masq",
                file.display(),
                k.describe()
            );
        }
    }
    print!("{text}");
    Ok(())
}

/// The whole stream. `command` is how it was asked for (for the header).
pub fn render(a: &ManifestArgs, command: &str) -> Result<String> {
    let (header, docs) = documents(a, command)?;
    let (text, unused) = yaml::render(&header, &docs);
    debug_assert!(unused.is_empty(), "comments matching nothing: {unused:?}");
    Ok(text)
}

/// The header comment and the documents, in their order.
fn documents(a: &ManifestArgs, command: &str) -> Result<(String, Vec<Doc>)> {
    let names = [
        ("--namespace", &a.namespace),
        ("--name", &a.name),
        ("--ip-masq-agent-configmap", &a.ip_masq_agent_configmap),
    ];
    for (opt, name) in names {
        check_dns_label(opt, name)?;
    }
    check_dns_label("--name", &format!("{}-metrics", a.name))?;
    check_dns_label("--name", &format!("{}-uninstall", a.name))?;
    if let Some(pc) = &a.priority_class {
        check_dns_subdomain("--priority-class", pc)?;
    }
    if a.ip_masq_agent_on() && a.ip_masq_agent_file.is_none() && a.namespace != "kube-system" {
        let msg = format!(
            "--ip-masq-agent: the DaemonSet would mount ConfigMap {:?} of namespace {:?}, but ConfigMap volumes are \
             namespaced and ip-masq-agent's own is in kube-system: use --namespace kube-system, or \
             --ip-masq-agent-file FILE to ship a copy in {:?}",
            a.ip_masq_agent_configmap, a.namespace, a.namespace
        );
        return Err(Error::new(code::INVALID_CONFIG, msg));
    }
    let dirs = node_dirs(a)?;
    for (opt, q) in [("--cpu-request", Some(&a.cpu_request)), ("--memory-request", Some(&a.memory_request)),
                     ("--cpu-limit", a.cpu_limit.as_ref()), ("--memory-limit", Some(&a.memory_limit))] {
        if let Some(q) = q.filter(|q| !is_quantity(q)) {
            let msg = format!("{opt} {q:?}: not a Kubernetes quantity (e.g. 100m, 64Mi, 1)");
            return Err(Error::new(code::INVALID_CONFIG, msg));
        }
    }
    let image = a.image.clone().unwrap_or_else(|| format!("localhost/ebpf-masq:{}", env!("CARGO_PKG_VERSION")));
    if image.is_empty() || image.contains(char::is_whitespace) {
        return Err(Error::new(code::INVALID_CONFIG, format!("--image {image:?}: not an image reference")));
    }
    let labels = json!({ NAME_LABEL: a.name });
    // Validated (and its pinPath known) in both modes: one set of options serves both.
    let entry = plugin_entry(a)?;

    let mut docs = Vec::new();
    if !a.existing_namespace && a.namespace != "kube-system" {
        docs.push(namespace(a));
    }
    if a.uninstall {
        docs.push(uninstall::service_account(a));
        if node::needs_priority_quota(a) {
            docs.push(priority_quota(a));
        }
        docs.push(uninstall::daemonset(a, &image, &dirs, &entry));
        return Ok((uninstall::header(a, &image, command, &dirs), docs));
    }
    docs.push(
        Doc::new(json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": a.name, "namespace": a.namespace, "labels": labels},
            "automountServiceAccountToken": false,
        }))
        .comment("automountServiceAccountToken", "The pods never talk to the API server."),
    );
    docs.push(
        Doc::new(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": format!("{}-config", a.name), "namespace": a.namespace, "labels": labels},
            "data": {CONFIG_KEY: entry_json(&entry)},
        }))
        .comment(
            &format!("data.{CONFIG_KEY}"),
            "One ebpf-masq plugin config (README \"Configuration\"). The agent writes it, without\n\
             cniVersion and name, as the last plugin of the node's conflist and reconciles the node to it;\n\
             an edit here reaches running nodes within a minute (kubelet's ConfigMap sync), no pod restart.",
        ),
    );
    if node::needs_priority_quota(a) {
        docs.insert(docs.len() - 1, priority_quota(a));
    }
    if let Some(file) = &a.ip_masq_agent_file {
        docs.push(ip_masq_agent_configmap(a, file)?);
    }
    docs.push(daemonset(a, &image, &dirs));
    if a.metrics_service || a.service_monitor {
        docs.push(service(a));
    }
    if a.service_monitor {
        docs.push(service_monitor(a)?);
    }

    Ok((header(a, &image, command, &dirs), docs))
}

fn header(a: &ManifestArgs, image: &str, command: &str, dirs: &NodeDirs) -> String {
    let port = a.metrics_port;
    let (bin, conf, ns, name) = (&dirs.bin, &dirs.conf, &a.namespace, &a.name);
    format!(
        "ebpf-masq on every node of a Kubernetes cluster, as `{command}` renders it\n\
         (`ebpf-masq manifest --help` lists the options; conf/daemonset.yaml is the output with none):\n\
         \n  podman build -t {image} -f Containerfile .   # then push it where your nodes pull from\n  \
         {command} | kubectl apply -f -\n\
         \n\
         The container runs `ebpf-masq agent`: it copies the binary to the node's {bin}, chains\n\
         ebpf-masq into the node's primary conflist in {conf} (the main CNI plugin -- bridge, ptp,\n\
         Calico, Flannel, ... -- writes it; until then the agent waits, and /healthz says so), loads and\n\
         attaches the data plane as `apply` does, and keeps all of it in step with the ConfigMap and with\n\
         the main plugin's rewrites of its conflist. /metrics on port {port} (Prometheus annotations below),\n\
         /healthz for the probes.\n\
         \n\
         Before applying: turn off the main plugin's own masquerade (bridge/ptp \"ipMasq\": false, Calico\n\
         IPPool natOutgoing: false, flanneld without --ip-masq) and set nativeRoutingCIDR to the pod CIDR\n\
         (--native-routing-cidr). The main plugin's config may use any CNI version from 0.3.0 (Calico and\n\
         Flannel ship 0.3.1). See conf/README.md. Uninstall (README \"On a cluster\"): delete this DaemonSet\n\
         (kubectl -n {ns} delete ds {name} --cascade=foreground), then apply the output of the same\n\
         command with --uninstall, wait until its DaemonSet is ready on every node, and delete both."
    )
}

/// The options as a shell would take them back.
fn command_line(opts: &[String]) -> String {
    let mut s = String::from("ebpf-masq manifest");
    for o in opts {
        s.push(' ');
        if !o.is_empty() && o.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c)) {
            s.push_str(o);
        } else if !o.contains(['\'', '\n']) {
            s.push_str(&format!("'{o}'"));
        } else {
            s.push_str(&format!("{o:?}"));
        }
    }
    s
}

// ---------------------------------------------------------------------------
// the plugin entry
// ---------------------------------------------------------------------------

/// The ConfigMap's entry: --conf (or the defaults), then the options over it;
/// validated by the plugin's parser.
fn plugin_entry(a: &ManifestArgs) -> Result<Map<String, Value>> {
    let mut entry = match &a.conf {
        Some(f) => entry_from_file(f)?,
        None => json!({"natOutgoing": true, "nativeRoutingCIDR": ["10.244.0.0/16"], "pinPath": DEFAULT_PIN_PATH})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    // cniVersion, name and type first, as a conflist entry reads.
    let mut m = Map::new();
    m.insert("cniVersion".into(), entry.shift_remove("cniVersion").unwrap_or_else(|| json!("1.0.0")));
    m.insert("name".into(), entry.shift_remove("name").unwrap_or_else(|| json!(a.name)));
    m.insert("type".into(), entry.shift_remove("type").unwrap_or_else(|| json!(PLUGIN_TYPE)));
    m.extend(entry);

    let list = |v: &[String]| Value::Array(v.iter().map(|s| json!(s)).collect());
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    if a.nat_outgoing || a.no_nat_outgoing {
        set("natOutgoing", json!(a.nat_outgoing));
    }
    for (k, v) in [("nativeRoutingCIDR", &a.native_routing_cidr), ("nonMasqueradeCIDRs", &a.non_masquerade_cidr),
                   ("egressInterfaces", &a.egress_interface), ("masqueradeAddress", &a.masquerade_address)] {
        if !v.is_empty() {
            set(k, list(v));
        }
    }
    for kv in &a.set {
        let (k, v) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| Error::new(code::INVALID_CONFIG, format!("--set {kv:?}: expected KEY=VALUE")))?;
        set(k, serde_json::from_str(v).unwrap_or_else(|_| json!(v)));
    }
    if let Some(dir) = &a.natlog_dir {
        node::check_host_dir("--natlog-dir", dir)?;
        let file = json!(format!("{}/{NATLOG_FILE}", dir.trim_end_matches('/')));
        match m.get_mut("natLog") {
            None => {
                m.insert("natLog".into(), json!({ "file": file }));
            }
            Some(Value::Object(o)) if !o.contains_key("file") => {
                o.insert("file".into(), file);
            }
            _ => {} // the file it names is checked below; a bad value by the parser
        }
    }

    let what = match a.conf {
        Some(_) => "the ConfigMap's entry (--conf and the options)",
        None => "the ConfigMap's entry",
    };
    let c = config::parse_conf_file(entry_json(&m).as_bytes()).map_err(|e| e.context(what))?;
    if !c.masq.pin_path.starts_with(BPFFS) {
        let msg = format!("{}: must be under {BPFFS}, the DaemonSet's bpffs mount", c.masq.pin_path.display());
        return Err(Error::config("pinPath", msg).context(what));
    }
    if let Some(file) = c.masq.nat_log.as_ref().and_then(|l| l.file.as_ref()) {
        let dir = a.natlog_dir.as_deref().map(|d| d.trim_end_matches('/'));
        let msg = match dir {
            None => Some(format!(
                "{}: would be written inside the container and lost with it: give --natlog-dir DIR, a node \
                 directory holding it (e.g. --natlog-dir {})",
                file.display(),
                file.parent().map_or("/var/log/ebpf-masq".into(), |p| p.display().to_string())
            )),
            Some(d) if !file.starts_with(d) || file == Path::new(d) => {
                Some(format!("{}: must be under --natlog-dir {d}, the node directory the DaemonSet mounts", file.display()))
            }
            Some(_) => None,
        };
        if let Some(msg) = msg {
            return Err(Error::config("natLog.file", msg).context(what));
        }
    }
    Ok(m)
}

/// The ebpf-masq entry of --conf, validated as `validate --conf` does (errors
/// name the key as it is in the file); a conflist's cniVersion and name go with it.
fn entry_from_file(f: &Path) -> Result<Map<String, Value>> {
    let bytes = std::fs::read(f).ctx(code::IO_FAILURE, format!("read {}", f.display()))?;
    let v: Value = serde_json::from_slice(&bytes).ctx(code::DECODE_FAILURE, format!("--conf {}", f.display()))?;
    let Some(obj) = v.as_object() else {
        return Err(Error::new(code::INVALID_CONFIG, format!("--conf {}: not a JSON object", f.display())));
    };
    let Some(plugins) = obj.get("plugins") else {
        // One plugin config: cniVersion and name may be left out, as inside a conflist.
        let mut full = Map::new();
        full.insert("cniVersion".into(), json!("1.0.0"));
        full.insert("name".into(), json!(PLUGIN_TYPE));
        full.extend(obj.clone());
        config::parse_conf_file(serde_json::to_string(&full).unwrap_or_default().as_bytes())
            .map_err(|e| e.context(format!("--conf {}", f.display())))?;
        return Ok(obj.clone());
    };
    config::parse_conf_file(&bytes).map_err(|e| e.context(format!("--conf {}", f.display())))?;
    let ours = plugins.as_array().into_iter().flatten().filter_map(Value::as_object);
    let mut entry = ours.into_iter().find(|p| p.get("type") == Some(&json!(PLUGIN_TYPE))).cloned().unwrap_or_default();
    for k in ["name", "cniVersion"] {
        if let Some(v) = obj.get(k) {
            entry.insert(k.into(), v.clone());
        }
    }
    Ok(entry)
}

/// The entry as the ConfigMap holds it: one key a line, a value on its key's
/// line when that fits in `JSON_WIDTH`, broken up (the same way) otherwise.
fn entry_json(m: &Map<String, Value>) -> String {
    let mut out = String::new();
    json_member(&mut out, 0, None, &Value::Object(m.clone()), "");
    out
}

fn json_member(out: &mut String, indent: usize, key: Option<&str>, v: &Value, comma: &str) {
    let head = format!("{:indent$}{}", "", key.map(|k| format!("{}: ", json!(k))).unwrap_or_default());
    let flat = json_compact(v);
    let children: Vec<(Option<&str>, &Value)> = match v {
        Value::Object(o) => o.iter().map(|(k, v)| (Some(k.as_str()), v)).collect(),
        Value::Array(a) => a.iter().map(|v| (None, v)).collect(),
        _ => Vec::new(),
    };
    // The top level is always broken up; anything else when it does not fit.
    if children.is_empty() || (indent > 0 && head.len() + flat.len() + comma.len() <= JSON_WIDTH) {
        out.push_str(&format!("{head}{flat}{comma}\n"));
        return;
    }
    let (open, close) = if v.is_object() { ('{', '}') } else { ('[', ']') };
    out.push_str(&format!("{head}{open}\n"));
    for (i, (k, c)) in children.iter().enumerate() {
        json_member(out, indent + 2, *k, c, if i + 1 < children.len() { "," } else { "" });
    }
    out.push_str(&format!("{:indent$}{close}{comma}\n", ""));
}

/// One line, with a space after each ',' and ':' as people write it.
fn json_compact(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let kv: Vec<String> = o.iter().map(|(k, v)| format!("{}: {}", json!(k), json_compact(v))).collect();
            format!("{{{}}}", kv.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(json_compact).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

fn ip_masq_agent_configmap(a: &ManifestArgs, file: &Path) -> Result<Doc> {
    let what = format!("--ip-masq-agent-file {}", file.display());
    let bytes = std::fs::read(file).ctx(code::IO_FAILURE, format!("read {}", file.display()))?;
    config::parse_ip_masq_agent(&bytes, a.ip_masq_agent_all_reserved_ranges).map_err(|e| e.context(&what))?;
    let text = String::from_utf8(bytes).map_err(|_| Error::new(code::DECODE_FAILURE, format!("{what}: not UTF-8")))?;
    Ok(Doc::new(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": a.ip_masq_agent_configmap, "namespace": a.namespace, "labels": {NAME_LABEL: a.name}},
        "data": {IP_MASQ_AGENT_KEY: text},
    }))
    .comment(
        &format!("data.{IP_MASQ_AGENT_KEY}"),
        "ip-masq-agent's config, as ip-masq-agent reads it (from the file given to --ip-masq-agent-file).",
    ))
}

// ---------------------------------------------------------------------------
// checks of what the API server would refuse
// ---------------------------------------------------------------------------

/// An RFC 1123 subdomain, as Kubernetes wants a PriorityClass's name.
fn check_dns_subdomain(opt: &str, s: &str) -> Result<()> {
    let ok = s.len() <= 253 && !s.is_empty() && s.split('.').all(ebpf_masq_core::config::egress_policy::is_dns_label);
    if ok {
        Ok(())
    } else {
        Err(Error::new(code::INVALID_CONFIG, format!("{opt}: {s:?} is not a valid name (lower-case DNS subdomain)")))
    }
}

/// An RFC 1123 label, as Kubernetes wants names of Namespaces and Services.
fn check_dns_label(opt: &str, s: &str) -> Result<()> {
    if ebpf_masq_core::config::egress_policy::is_dns_label(s) {
        Ok(())
    } else {
        Err(Error::new(
            code::INVALID_CONFIG,
            format!(
                "{opt}: {s:?} is not a valid name (lower-case letters, digits and '-', at most 63, \
                 a letter or digit at each end)"
            ),
        ))
    }
}

/// A Kubernetes resource quantity: a decimal number, then a binary (Ki..Ei),
/// decimal (n, u, m, k, M..E) or exponent (e3, E-2) suffix, or none.
fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let num_end = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let digits = num.replace('.', "");
    let number_ok = !digits.is_empty() && num.matches('.').count() <= 1;
    let exponent_ok = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    };
    number_ok
        && (["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"].contains(&suffix)
            || suffix.strip_prefix(['e', 'E']).is_some_and(exponent_ok))
}

#[cfg(test)]
mod tests;
