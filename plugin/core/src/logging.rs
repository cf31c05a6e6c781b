//! A minimal logger: one line per record to `logFile` (never stdout, which is
//! the CNI protocol), or to stderr when no file is configured.

use std::{
    fs::OpenOptions,
    io::Write,
    path::{Path, PathBuf},
    sync::OnceLock,
};

use log::{LevelFilter, Log, Metadata, Record};

struct Logger {
    file: Option<PathBuf>,
    level: LevelFilter,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        // netlink-packet-route warns about every attribute newer than itself: noise.
        if m.target().starts_with("netlink_packet") && m.level() > log::Level::Error {
            return false;
        }
        // aya's loader debug output is only useful at trace.
        if m.target().starts_with("aya") && self.level < LevelFilter::Trace && m.level() > log::Level::Warn {
            return false;
        }
        m.level() <= self.level
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let line = format!(
            "ts={}.{:03} level={} pid={} {}\n",
            now.as_secs(),
            now.subsec_millis(),
            r.level().as_str().to_lowercase(),
            std::process::id(),
            r.args()
        );
        match &self.file {
            Some(p) => {
                // O_APPEND keeps concurrent plugin processes' lines whole.
                if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(p) {
                    let _ignored_log_write_failure = f.write_all(line.as_bytes());
                }
            }
            None => eprint!("{line}"),
        }
    }

    fn flush(&self) {}
}

pub fn init(level: LevelFilter, file: Option<&Path>) {
    // Without a logFile, CNI calls stay quiet below warnings (stderr reaches the runtime's log).
    let level = if file.is_none() { level.min(LevelFilter::Warn) } else { level };
    install(level, file);
}

/// A long-running process (the agent): every line at `level` goes to stderr,
/// which is the container's log.
pub fn init_stderr(level: LevelFilter) {
    install(level, None);
}

fn install(level: LevelFilter, file: Option<&Path>) {
    let logger = LOGGER.get_or_init(|| Logger { file: file.map(Path::to_path_buf), level });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(logger.level);
    }
}
