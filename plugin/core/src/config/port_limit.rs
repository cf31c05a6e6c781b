//! A pod's hard port limit (RFC 6888 REQ-4): the most ports it may hold towards
//! one remote endpoint (address, port, protocol) on one node address. The
//! network's `podPortLimit` is every pod's; the pod's annotation
//! `ebpf-masq.io/port-limit` may lower it, never raise it.

use serde_json::Value;

use crate::error::{code, Error, Result};

use super::diag::{quote, wrong_type};
use super::keys::key;

/// The pod annotation that lowers the network's podPortLimit for one pod.
pub const PORT_LIMIT_ANNOTATION: &str = "ebpf-masq.io/port-limit";

/// `podPortLimit`: an integer 1-65535 (ports).
pub(super) fn parse_pod_port_limit(key: &str, v: &Value) -> Result<u16> {
    let Value::Number(n) = v else {
        return Err(wrong_type(key, "an integer number of ports", v));
    };
    match (n.as_u64(), n.as_i64()) {
        (Some(p), _) if (1..=u64::from(u16::MAX)).contains(&p) => Ok(p as u16),
        (Some(_), _) | (None, Some(_)) => Err(Error::config(
            key,
            format!("must be between 1 and 65535 ports (leave the key out for no limit), got {n}"),
        )),
        (None, None) => Err(wrong_type(key, "an integer number of ports", v)),
    }
}

/// The limit in force for a pod: the network's `podPortLimit` (`network`), or the
/// pod's annotation (a decimal string 1-65535) when it gives one no higher; None
/// when neither is given. A malformed annotation, or one above the network's
/// limit, is the code 7 error naming the annotation.
pub fn effective_port_limit(network: Option<u16>, annotation: Option<&str>) -> Result<Option<u16>> {
    let Some(s) = annotation else { return Ok(network) };
    let refuse = |why: String| Error::new(code::INVALID_CONFIG, format!("annotation {}: {why}", quote(PORT_LIMIT_ANNOTATION)));
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse(format!("{} is not a port limit; expected a whole number of ports 1-65535", quote(s))));
    }
    let limit = match s.parse::<u16>() {
        Ok(n) if n >= 1 => n,
        _ => return Err(refuse(format!("{} is out of range; a port limit is 1-65535 ports", quote(s)))),
    };
    match network {
        Some(max) if limit > max => Err(refuse(format!(
            "{limit} is above the network's {} {max}; an annotation may only lower it",
            key::POD_PORT_LIMIT
        ))),
        _ => Ok(Some(limit)),
    }
}
