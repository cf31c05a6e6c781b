//! tc filters: whether ours is attached to a clsact hook.

use super::{nl_err, run};
use crate::error::{Error, Result};

/// Whether a tc filter with priority (preference) `priority` is attached to
/// the clsact `ingress` (true) or egress (false) hook of `ifindex` in the
/// calling thread's netns. A missing device or missing clsact qdisc gives
/// Ok(false). Any filter kind counts; we identify ours by priority alone.
pub fn has_tc_filter(ifindex: u32, ingress: bool, priority: u16) -> Result<bool> {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
    use netlink_packet_route::tc::{TcHandle, TcMessage};
    use netlink_packet_route::RouteNetlinkMessage;

    let Ok(index) = i32::try_from(ifindex) else { return Ok(false) };
    let hook = if ingress { "ingress" } else { "egress" };
    let what = format!("cannot list tc {hook} filters of ifindex {ifindex}");
    run(move |mut handle| async move {
        // rtnetlink's TrafficFilterGetRequest cannot set a clsact parent, so
        // build the RTM_GETTFILTER dump by hand.
        let mut msg = TcMessage::default();
        msg.header.index = index;
        msg.header.parent = TcHandle {
            major: TcHandle::CLSACT.major,
            minor: if ingress { TcHandle::MIN_INGRESS } else { TcHandle::MIN_EGRESS },
        };
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::GetTrafficFilter(msg));
        req.header.flags = NLM_F_REQUEST | NLM_F_DUMP;
        let mut replies = handle.request(req).map_err(|e| nl_err(&what, e))?;
        let mut found = false;
        while let Some(reply) = futures::StreamExt::next(&mut replies).await {
            match reply.payload {
                // tcm_info = (priority << 16) | protocol
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewTrafficFilter(f))
                    if (f.header.info >> 16) as u16 == priority =>
                {
                    found = true;
                }
                NetlinkPayload::Error(e) => {
                    let errno = -e.raw_code();
                    if errno == libc::ENODEV || errno == libc::EINVAL || errno == libc::ENOENT {
                        return Ok(false);
                    }
                    return Err(Error::netlink(format!("{what}: {}", e.to_io())));
                }
                _ => {}
            }
        }
        Ok(found)
    })
}
