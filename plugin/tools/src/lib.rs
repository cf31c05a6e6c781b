//! The operator CLI: status, nat list, apply, explain, metrics, monitor, install /
//! uninstall / validate, the DaemonSet's agent and its manifest. Each command is a room of
//! its own; they read the node through `node`, `pod` and `bpf`, never through
//! each other but for `readers` (the pinned maps as rows) and `status`.

pub mod agent;
pub mod apply;
pub mod explain;
pub mod install;
pub mod manifest;
pub mod memlimit;
pub mod metrics;
pub mod monitor;
pub mod nat_list;
pub mod natlog;
pub mod readers;
pub mod status;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use ebpf_masq_core::{bpf::loader::Pins, config::DEFAULT_PIN_PATH, error::Error};

#[derive(Parser, Debug)]
#[command(
    name = "ebpf-masq",
    version,
    about = "eBPF masquerade (SNAT) for pod and tunnel traffic: a chained CNI plugin and its operator CLI",
    long_about = "eBPF masquerade (SNAT) for pod and tunnel traffic.\n\n\
        As a CNI plugin (CNI_COMMAND set) it is listed after the main plugin in a conflist.\n\
        Without CNI_COMMAND it is the operator CLI below. All state lives in bpffs pins under --pin-path."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Programs, attachments, config in force, pods and counters of this node
    Status {
        #[command(flatten)]
        pins: PinPathArg,
        #[arg(long, help = "machine-readable output")]
        json: bool,
    },
    /// NAT tables
    Nat {
        #[command(subcommand)]
        cmd: NatCmd,
    },
    /// Reconcile the node (config, exclusions, rules, uplinks) to a config, with no pod needed
    Apply {
        #[arg(long, help = "a conflist holding an ebpf-masq entry, or a single ebpf-masq plugin config")]
        conf: PathBuf,
    },
    /// Explain what the data plane does to one packet (masquerade or not, and why), from the pinned maps
    #[command(long_about = explain::LONG_HELP)]
    Explain(explain::ExplainArgs),
    /// Counters in the Prometheus text format, printed once or served on GET /metrics
    #[command(long_about = metrics::LONG_HELP)]
    Metrics(metrics::MetricsArgs),
    /// Put ebpf-masq on this node: copy the binary, chain it into the node's CNI conflist
    #[command(long_about = install::INSTALL_LONG_HELP, after_help = install::INSTALL_AFTER_HELP)]
    Install(install::InstallArgs),
    /// Take ebpf-masq off this node: conflist entry, binary, attached programs, pins
    #[command(long_about = install::UNINSTALL_LONG_HELP, after_help = install::UNINSTALL_AFTER_HELP)]
    Uninstall(install::UninstallArgs),
    /// The DaemonSet's main process: install, apply, then keep chain and config in step; /metrics, /healthz
    #[command(long_about = agent::LONG_HELP)]
    Agent(agent::AgentArgs),
    /// Print the Kubernetes objects (DaemonSet, ConfigMap, ...) that run the agent on every node
    #[command(long_about = manifest::LONG_HELP, after_long_help = manifest::PRESETS_HELP)]
    Manifest(Box<manifest::ManifestArgs>),
    /// The NAT session log: who held a node address and port, and its IPFIX export
    Natlog(natlog::NatlogArgs),
    /// The data plane's events as they happen: NAT pairs made and ended, refusals, drops
    #[command(long_about = monitor::LONG_HELP)]
    Monitor(monitor::MonitorArgs),
    /// Check a conflist or plugin config as the plugin would, touching nothing
    #[command(long_about = install::VALIDATE_LONG_HELP)]
    Validate {
        #[arg(long, help = "a conflist holding an ebpf-masq entry, or a single ebpf-masq plugin config")]
        conf: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum NatCmd {
    /// One line per masqueraded flow: proto, pod addr:port -> node addr:port -> remote addr:port, age, packets
    List {
        #[command(flatten)]
        pins: PinPathArg,
        #[arg(long, help = "print a JSON array")]
        json: bool,
        #[arg(long, value_name = "NAME", help = "only the flows that took the address of this egress policy")]
        policy: Option<String>,
    },
}

/// `--pin-path DIR` of the commands that read a node's pins.
#[derive(clap::Args, Debug, Clone)]
pub struct PinPathArg {
    #[arg(long, default_value = DEFAULT_PIN_PATH, help = "bpffs directory holding the pins (the plugin's pinPath)")]
    pub pin_path: PathBuf,
}

impl PinPathArg {
    pub fn pins(&self) -> Pins {
        Pins::new(&self.pin_path)
    }
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Status { pins, json } => status::run(&pins.pins(), json),
        Command::Nat { cmd: NatCmd::List { pins, json, policy } } => nat_list::list(&pins.pins(), json, policy.as_deref()),
        Command::Apply { conf } => apply::run(&conf),
        Command::Explain(args) => explain::main(&args),
        Command::Metrics(args) => metrics::main(&args),
        Command::Install(args) => install::install(&args),
        Command::Uninstall(args) => install::uninstall(&args),
        Command::Validate { conf } => install::validate(&conf),
        Command::Agent(args) => agent::main(&args),
        Command::Manifest(args) => manifest::main(&args),
        Command::Natlog(a) => natlog::main(&a),
        Command::Monitor(args) => monitor::main(&args),
    };
    match res {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ebpf-masq: {}", describe(&e));
            1
        }
    }
}

fn describe(e: &Error) -> String {
    format!("{e} (code {})", e.code)
}
