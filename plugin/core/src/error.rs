//! One error type for the whole plugin, carrying the CNI error code it maps to.
//!
//! Codes follow the CNI spec where one fits (1 incompatible version, 4 invalid
//! environment, 7 invalid network config, 11 try again later); ours start at 100.

use std::fmt;

/// CNI spec error codes and our own (>= 100).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const INVALID_ENV: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// Loading, pinning or verifying the BPF programs or maps failed.
    pub const BPF: u32 = 100;
    /// A netlink operation (link lookup, qdisc, filter) failed.
    pub const NETLINK: u32 = 101;
    /// Node or pod state is not what it should be (CHECK failures).
    pub const STATE: u32 = 102;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error { code, msg: msg.into(), details: String::new() }
    }

    /// Invalid configuration: `key` is named first in the message so a user can find it.
    pub fn config(key: &str, msg: impl fmt::Display) -> Self {
        Error::new(code::INVALID_CONFIG, format!("invalid config key \"{key}\": {msg}"))
    }

    pub fn env(var: &str, msg: impl fmt::Display) -> Self {
        Error::new(code::INVALID_ENV, format!("invalid environment variable {var}: {msg}"))
    }

    pub fn bpf(msg: impl fmt::Display) -> Self {
        Error::new(code::BPF, msg.to_string())
    }

    /// `what: cause` with `code`: the one way an error gets its context
    /// (see also [`Context`] for results).
    pub fn at(code: u32, what: impl fmt::Display, cause: impl fmt::Display) -> Self {
        Error::new(code, format!("{what}: {cause}"))
    }

    /// `what: cause` as a BPF error (a map, program or pin operation failed).
    pub fn bpf_at(what: impl fmt::Display, cause: impl fmt::Display) -> Self {
        Error::at(code::BPF, what, cause)
    }

    pub fn netlink(msg: impl fmt::Display) -> Self {
        Error::new(code::NETLINK, msg.to_string())
    }

    pub fn state(msg: impl fmt::Display) -> Self {
        Error::new(code::STATE, msg.to_string())
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Prefix the message with what we were doing, keeping the code.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    /// The CNI error object printed on stdout.
    pub fn to_cni_json(&self, cni_version: &str) -> serde_json::Value {
        let mut v = serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            v["details"] = serde_json::Value::String(self.details.clone());
        }
        v
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Attach context to any error while choosing its CNI code.
pub trait Context<T> {
    fn ctx(self, code: u32, what: impl fmt::Display) -> Result<T>;

    /// `ctx` with the BPF code: a map, program or pin operation failed.
    fn bpf_ctx(self, what: impl fmt::Display) -> Result<T>
    where
        Self: Sized,
    {
        self.ctx(code::BPF, what)
    }
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn ctx(self, code: u32, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::at(code, what, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_names_key_and_code_7() {
        let e = Error::config("portRange", "low must be <= high");
        assert_eq!(e.code, 7);
        assert!(e.msg.contains("\"portRange\""));
        let j = e.to_cni_json("1.0.0");
        assert_eq!(j["code"], 7);
        assert_eq!(j["cniVersion"], "1.0.0");
        assert!(j.get("details").is_none());
    }

    #[test]
    fn context_keeps_code() {
        let r: std::result::Result<(), &str> = Err("boom");
        let e = r.ctx(code::NETLINK, "attach to eth0").unwrap_err();
        assert_eq!(e.code, 101);
        assert_eq!(e.msg, "attach to eth0: boom");
    }
}
