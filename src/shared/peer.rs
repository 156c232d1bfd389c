//! Who is on the other end of a TCP connection on this host.
//!
//! Credentials go to loopback listeners: a push to a local Alloy or
//! Collector, `emberd login` to the daemon's port, a browser's login to the
//! daemon. A port is not a name: while the intended server is down, any
//! local user may bind its port and read what is sent there. The kernel
//! knows who owns each local socket, so the sender asks it after
//! connecting and before sending anything.
//!
//! Why after connecting, and about the far end of this very connection: a
//! check of the port's listener before `connect` races with a listener
//! that binds between the two. The accepted socket at the far end is
//! created by the listener (its `sk_uid` is copied from the listener's), so
//! the established socket whose local address is our peer's and whose
//! remote address is our local one names the user who reads what we send.
//! Nothing is written before the answer.
//!
//! How: netlink `sock_diag` (`SOCK_DIAG_BY_FAMILY` with the exact 4-tuple,
//! no dump: one lookup in the kernel's hash of established sockets), and
//! where netlink is not allowed (systemd's `RestrictAddressFamilies=`
//! without `AF_NETLINK`, seccomp) `/proc/net/tcp` and `/proc/net/tcp6`.
//! Both answer the same (a unit test holds them to it).
//!
//! A peer not found among this host's sockets is another host's (or in a
//! network namespace the sender does not see): no check can be made, and
//! none is. A socket in a state that reports no owner (`SYN_RECV`, whose
//! child is not created yet, reports uid 0; `TIME_WAIT` too) is asked again
//! for a moment, then refused: it never counts as root.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Who owns the far end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerOwner {
    /// A socket of this host owned by this uid.
    Uid(u32),
    /// No socket of this host: another host's.
    Remote,
    /// A socket of this host in a state that names no owner (the TCP state
    /// number, as `/proc/net/tcp` shows it).
    Unsettled(u8),
}

/// TCP states whose socket is a full socket carrying its creator's uid.
fn owned_state(state: u8) -> bool {
    // ESTABLISHED, FIN_WAIT1, FIN_WAIT2, CLOSE, CLOSE_WAIT, LAST_ACK, CLOSING.
    matches!(state, 1 | 4 | 5 | 7 | 8 | 9 | 11)
}

/// The owner of the socket whose local address is `peer` and whose remote
/// address is `local` (the far end of our connection `local -> peer`).
/// Waits up to 200 ms for a socket still being set up.
pub fn owner_of_peer(local: SocketAddr, peer: SocketAddr) -> io::Result<PeerOwner> {
    let mut last = PeerOwner::Remote;
    for _ in 0..100 {
        last = lookup(local, peer)?;
        match last {
            PeerOwner::Unsettled(_) => std::thread::sleep(Duration::from_millis(2)),
            _ => return Ok(last),
        }
    }
    Ok(last)
}

/// One lookup: netlink, or `/proc/net` where netlink is not allowed.
fn lookup(local: SocketAddr, peer: SocketAddr) -> io::Result<PeerOwner> {
    match diag::lookup(local, peer) {
        Ok(o) => Ok(o),
        Err(_) => proc_lookup(local, peer),
    }
}

/// An address as the kernel compares it: IPv4-mapped IPv6 as IPv4.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// `/proc/net/tcp`'s `ADDR:PORT`: the address as the kernel's words, each
/// printed `%08X` in host byte order, then the port in hex.
fn parse_proc_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for i in (0..ip.len()).step_by(8) {
        let word = u32::from_str_radix(ip.get(i..i + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip: IpAddr = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok()?.into(),
        16 => <[u8; 16]>::try_from(bytes).ok()?.into(),
        _ => return None,
    };
    Some(canonical(SocketAddr::new(ip, port)))
}

/// The same lookup in `/proc/net/tcp` and `/proc/net/tcp6`.
pub fn proc_lookup(local: SocketAddr, peer: SocketAddr) -> io::Result<PeerOwner> {
    let (local, peer) = (canonical(local), canonical(peer));
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                continue;
            }
            if parse_proc_addr(f[1]) != Some(peer) || parse_proc_addr(f[2]) != Some(local) {
                continue;
            }
            let state = u8::from_str_radix(f[3], 16).unwrap_or(0);
            if !owned_state(state) {
                return Ok(PeerOwner::Unsettled(state));
            }
            let uid = f[7]
                .parse()
                .map_err(|_| io::Error::other(format!("{file}: uid {:?}", f[7])))?;
            return Ok(PeerOwner::Uid(uid));
        }
    }
    Ok(PeerOwner::Remote)
}

/// Netlink `sock_diag` (linux/inet_diag.h), one exact lookup.
mod diag {
    use super::{PeerOwner, canonical, owned_state};
    use std::io;
    use std::net::{IpAddr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLM_F_REQUEST: u16 = 1;
    const NLMSG_ERROR: u16 = 2;
    const INET_DIAG_NOCOOKIE: u32 = !0;
    /// `TCP_LISTEN`: the kernel's lookup falls back to a listener when no
    /// established socket matches; that is not our peer.
    const TCP_LISTEN: u8 = 10;

    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct NlMsgHdr {
        len: u32,
        kind: u16,
        flags: u16,
        seq: u32,
        pid: u32,
    }

    /// `struct inet_diag_sockid`: ports and addresses in network order.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct SockId {
        sport: [u8; 2],
        dport: [u8; 2],
        src: [u8; 16],
        dst: [u8; 16],
        interface: u32,
        cookie: [u32; 2],
    }

    /// `struct inet_diag_req_v2`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct ReqV2 {
        family: u8,
        protocol: u8,
        ext: u8,
        pad: u8,
        states: u32,
        id: SockId,
    }

    /// `struct inet_diag_msg`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct DiagMsg {
        family: u8,
        state: u8,
        timer: u8,
        retrans: u8,
        id: SockId,
        expires: u32,
        rqueue: u32,
        wqueue: u32,
        uid: u32,
        inode: u32,
    }

    const _: () = assert!(size_of::<NlMsgHdr>() == 16);
    const _: () = assert!(size_of::<SockId>() == 48);
    const _: () = assert!(size_of::<ReqV2>() == 56);
    const _: () = assert!(size_of::<DiagMsg>() == 72);

    fn addr_bytes(ip: IpAddr) -> [u8; 16] {
        let mut out = [0u8; 16];
        match ip {
            IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => out = v6.octets(),
        }
        out
    }

    pub(super) fn lookup(local: SocketAddr, peer: SocketAddr) -> io::Result<PeerOwner> {
        let (local, peer) = (canonical(local), canonical(peer));
        let family = match peer.ip() {
            IpAddr::V4(_) => libc::AF_INET,
            IpAddr::V6(_) => libc::AF_INET6,
        };
        // SAFETY: plain socket(2); the fd is owned below.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        #[repr(C)]
        struct Request {
            hdr: NlMsgHdr,
            req: ReqV2,
        }
        let request = Request {
            hdr: NlMsgHdr {
                len: size_of::<Request>() as u32,
                kind: SOCK_DIAG_BY_FAMILY,
                flags: NLM_F_REQUEST,
                seq: 1,
                pid: 0,
            },
            req: ReqV2 {
                family: family as u8,
                protocol: libc::IPPROTO_TCP as u8,
                states: !0,
                id: SockId {
                    // The far end's socket: its source is our peer.
                    sport: peer.port().to_be_bytes(),
                    dport: local.port().to_be_bytes(),
                    src: addr_bytes(peer.ip()),
                    dst: addr_bytes(local.ip()),
                    cookie: [INET_DIAG_NOCOOKIE; 2],
                    ..SockId::default()
                },
                ..ReqV2::default()
            },
        };
        // SAFETY: the request is a plain repr(C) value of the given size.
        let sent = unsafe {
            libc::send(
                fd.as_raw_fd(),
                (&raw const request).cast(),
                size_of::<Request>(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 8192];
        // SAFETY: recv writes at most buf.len() bytes into buf.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = &buf[..n as usize];
        let hdr_len = size_of::<NlMsgHdr>();
        if got.len() < hdr_len {
            return Err(io::Error::other("sock_diag: short answer"));
        }
        // SAFETY: got holds at least a header; read_unaligned copies it out.
        let hdr: NlMsgHdr = unsafe { std::ptr::read_unaligned(got.as_ptr().cast()) };
        if hdr.kind == NLMSG_ERROR {
            let code = got
                .get(hdr_len..hdr_len + 4)
                .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                .unwrap_or(-libc::EIO);
            if code == -libc::ENOENT {
                return Ok(PeerOwner::Remote);
            }
            return Err(io::Error::from_raw_os_error(-code));
        }
        if hdr.kind != SOCK_DIAG_BY_FAMILY || got.len() < hdr_len + size_of::<DiagMsg>() {
            return Err(io::Error::other("sock_diag: unexpected answer"));
        }
        // SAFETY: got holds a header and a whole inet_diag_msg after it.
        let msg: DiagMsg = unsafe { std::ptr::read_unaligned(got[hdr_len..].as_ptr().cast()) };
        Ok(if msg.state == TCP_LISTEN {
            PeerOwner::Remote
        } else if owned_state(msg.state) {
            PeerOwner::Uid(msg.uid)
        } else {
            PeerOwner::Unsettled(msg.state)
        })
    }
}

/// Users a listener may run as: root, and these uids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trusted {
    /// Besides root.
    pub uids: Vec<u32>,
}

impl Trusted {
    /// Root and the user `spec` names (a name or a uid), if any.
    pub fn parse(key: &str, spec: Option<&str>) -> Result<Trusted, String> {
        let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
            return Ok(Trusted::default());
        };
        let uid = match spec.parse::<u32>() {
            Ok(uid) => uid,
            Err(_) => nix::unistd::User::from_name(spec)
                .map_err(|e| format!("{key} = {spec:?}: looking the user up: {e}"))?
                .ok_or_else(|| {
                    format!("{key} = {spec:?}: no such user on this host; give a user name or uid (root is always trusted)")
                })?
                .uid
                .as_raw(),
        };
        Ok(Trusted { uids: vec![uid] })
    }

    /// Root and `user` if it exists (a missing user adds nothing).
    pub fn root_and(user: &str) -> Trusted {
        Trusted {
            uids: nix::unistd::User::from_name(user)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
                .into_iter()
                .collect(),
        }
    }

    /// Whether `uid` is trusted.
    pub fn allows(&self, uid: u32) -> bool {
        uid == 0 || self.uids.contains(&uid)
    }

    /// "root" or "root or alloy (uid 990)", for messages.
    pub fn describe(&self) -> String {
        let mut out = "root".to_owned();
        for uid in &self.uids {
            out.push_str(&format!(" or {}", user_name(*uid)));
        }
        out
    }
}

/// "nobody (uid 65534)", or "uid 1234" without a name.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// Why a connection's far end was not trusted with a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    /// Another user's socket.
    #[error(
        "{peer} is served by {user}, not {trusted}: any local user can take a port while its server is down; nothing was sent"
    )]
    Owner {
        /// The far end.
        peer: SocketAddr,
        /// Its owner, as a name.
        user: String,
        /// Who is trusted.
        trusted: String,
    },
    /// The far end's owner could not be told.
    #[error("cannot tell who serves {peer} ({reason}); nothing was sent")]
    Unknown {
        /// The far end.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// Checks that the far end of the connection `local -> peer` is another
/// host's or owned by a trusted user.
pub fn check(local: SocketAddr, peer: SocketAddr, trusted: &Trusted) -> Result<(), Untrusted> {
    match owner_of_peer(local, peer) {
        Ok(PeerOwner::Remote) => Ok(()),
        Ok(PeerOwner::Uid(uid)) if trusted.allows(uid) => Ok(()),
        Ok(PeerOwner::Uid(uid)) => Err(Untrusted::Owner {
            peer,
            user: user_name(uid),
            trusted: trusted.describe(),
        }),
        Ok(PeerOwner::Unsettled(state)) => Err(Untrusted::Unknown {
            peer,
            reason: format!("its socket stays in TCP state {state}"),
        }),
        Err(e) => Err(Untrusted::Unknown {
            peer,
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_far_end_of_a_loopback_connection_is_ours_by_both_lookups() {
        let me = nix::unistd::geteuid().as_raw();
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = TcpListener::bind(bind) else {
                assert!(bind.starts_with('['), "binding {bind}");
                continue;
            };
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (_accepted, _) = l.accept().unwrap();
            let (local, peer) = (c.local_addr().unwrap(), c.peer_addr().unwrap());
            assert_eq!(
                diag::lookup(local, peer).unwrap(),
                PeerOwner::Uid(me),
                "{bind}"
            );
            assert_eq!(
                proc_lookup(local, peer).unwrap(),
                PeerOwner::Uid(me),
                "{bind}"
            );
            assert_eq!(owner_of_peer(local, peer).unwrap(), PeerOwner::Uid(me));
            // The other direction: the connecting socket is ours too.
            assert_eq!(proc_lookup(peer, local).unwrap(), PeerOwner::Uid(me));
            let t = Trusted { uids: vec![me] };
            assert_eq!(check(local, peer, &t), Ok(()));
        }
    }

    #[test]
    fn a_peer_no_socket_of_this_host_has_is_remote() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = l.local_addr().unwrap();
        // TEST-NET-3: no socket here has it.
        let far: SocketAddr = "203.0.113.9:4040".parse().unwrap();
        assert_eq!(diag::lookup(local, far).unwrap(), PeerOwner::Remote);
        assert_eq!(proc_lookup(local, far).unwrap(), PeerOwner::Remote);
    }

    #[test]
    fn proc_addresses_parse_as_the_kernel_prints_them() {
        let v4 = u32::from_ne_bytes([127, 0, 0, 1]);
        assert_eq!(
            parse_proc_addr(&format!("{v4:08X}:1F90")),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        // ::ffff:127.0.0.1 in tcp6 is the IPv4 address.
        let w = |b: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(b));
        let mapped = format!(
            "{}{}{}{}:0050",
            w([0; 4]),
            w([0; 4]),
            w([0, 0, 0xff, 0xff]),
            w([127, 0, 0, 1])
        );
        assert_eq!(
            parse_proc_addr(&mapped),
            Some("127.0.0.1:80".parse().unwrap())
        );
    }

    #[test]
    fn root_is_always_trusted_and_others_only_when_named() {
        let t = Trusted::parse("otlp_listener_user", None).unwrap();
        assert!(t.allows(0) && !t.allows(65534));
        assert_eq!(t.describe(), "root");
        let t = Trusted::parse("otlp_listener_user", Some("65534")).unwrap();
        assert!(t.allows(65534) && !t.allows(1000));
        let e = Trusted::parse("otlp_listener_user", Some("no-such-user-here")).unwrap_err();
        assert!(e.contains("no such user"), "{e}");
    }
}
