//! This process in; out, the same process in a network namespace of its own (inside a user
//! namespace when mvk is not root) with only its loopback interface up: 127.0.0.1 works, nothing
//! else is reachable.

use std::io;

/// Moves this process into a fresh network namespace (as non-root, inside a user namespace
/// that maps the user to itself) and brings its loopback interface up: 127.0.0.1 works, nothing
/// else is reachable.
pub(super) fn isolate_network() -> Result<(), String> {
    use nix::sched::{CloneFlags, unshare};
    if unshare(CloneFlags::CLONE_NEWNET).is_err() {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("no network namespace: {e}"))?;
        map_user(uid, gid)?;
    }
    loopback_up().map_err(|e| format!("cannot bring the loopback interface up: {e}"))
}

/// Maps UID and GID to themselves in the user namespace this process just entered.
pub(super) fn map_user(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write `{file}`: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

/// `ip link set lo up`, as one rtnetlink request (`RTM_NEWLINK` with `IFF_UP` on `lo`) and the
/// kernel's acknowledgement: a few bytes, so no netlink crate and no `ip` binary.
fn loopback_up() -> io::Result<()> {
    use rustix::net::{
        AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netdevice,
        netlink::SocketAddrNetlink, recv, sendto, socket_with,
    };
    const RTM_NEWLINK: u16 = 16;
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    const IFF_UP: u32 = 1;
    let fd = socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?;
    let index = netdevice::name_to_index(&fd, "lo")?;
    let index = i32::try_from(index).map_err(io::Error::other)?;
    // struct nlmsghdr (16 bytes) then struct ifinfomsg (16 bytes), native byte order.
    let mut msg = Vec::with_capacity(32);
    msg.extend(32u32.to_ne_bytes());
    msg.extend(RTM_NEWLINK.to_ne_bytes());
    msg.extend((NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend(1u32.to_ne_bytes()); // sequence number
    msg.extend(0u32.to_ne_bytes()); // port id: the kernel's
    msg.extend([0u8, 0u8]); // family AF_UNSPEC, padding
    msg.extend(0u16.to_ne_bytes()); // device type
    msg.extend(index.to_ne_bytes());
    msg.extend(IFF_UP.to_ne_bytes()); // flags
    msg.extend(IFF_UP.to_ne_bytes()); // change mask
    sendto(&fd, &msg, SendFlags::empty(), &SocketAddrNetlink::new(0, 0))?;
    let mut answer = [0u8; 256];
    let (got, _) = recv(&fd, &mut answer, RecvFlags::empty())?;
    // The acknowledgement: a header of type NLMSG_ERROR, then the error code (0: done).
    let field = |at: usize, len: usize| answer.get(at..at + len).filter(|_| at + len <= got);
    let kind = field(4, 2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_ne_bytes);
    let code = field(16, 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes);
    match (kind, code) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (Some(NLMSG_ERROR), Some(code)) => Err(io::Error::from_raw_os_error(-code)),
        _ => Err(io::Error::other(
            "the kernel's answer is not an acknowledgement",
        )),
    }
}
