//! The start of every connection: the 64-byte greeting (signature, version, mechanism) and
//! the NULL mechanism's READY exchange, where each side names its socket type, all within
//! the handshake timeout.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::codec::{encode_ready, Command, Item, Limits, MAX_COMMAND_BYTES};
use crate::connection::{Connection, Peer, Reader, Writer};
use crate::{Error, Options};

const GREETING: usize = 64;

/// The socket types this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    Pub,
    Sub,
    Dealer,
    Router,
}

impl SocketType {
    pub fn name(self) -> &'static str {
        match self {
            SocketType::Pub => "PUB",
            SocketType::Sub => "SUB",
            SocketType::Dealer => "DEALER",
            SocketType::Router => "ROUTER",
        }
    }

    /// Whether a peer of type `peer` may connect to this one (ZMTP's valid combinations).
    fn accepts(self, peer: &[u8]) -> bool {
        let valid: &[&[u8]] = match self {
            SocketType::Pub => &[b"SUB", b"XSUB"],
            SocketType::Sub => &[b"PUB", b"XPUB"],
            SocketType::Dealer => &[b"DEALER", b"ROUTER", b"REP"],
            SocketType::Router => &[b"DEALER", b"ROUTER", b"REQ"],
        };
        valid.contains(&peer)
    }
}

impl std::fmt::Display for SocketType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Ours: ZMTP 3.1, NULL, never the server side of a mechanism (NULL has none).
fn greeting() -> [u8; GREETING] {
    let mut g = [0u8; GREETING];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 1;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// The peer's minor version (0 for ZMTP 3.0; a later major version talks 3.1 to us, as the
/// RFC has newer peers step down).
fn check_greeting(g: &[u8; GREETING]) -> Result<u8, Error> {
    if g[0] != 0xFF || g[9] & 1 == 0 {
        return Err(Error::Greeting("no ZMTP signature".to_owned()));
    }
    let (major, minor) = (g[10], g[11]);
    if major < 3 {
        return Err(Error::Greeting(format!("version {major}.{minor}")));
    }
    let mechanism = &g[12..32];
    let end = mechanism.iter().position(|&b| b == 0).unwrap_or(20);
    if &mechanism[..end] != b"NULL" || mechanism[end..].iter().any(|&b| b != 0) {
        return Err(Error::Mechanism(
            String::from_utf8_lossy(&mechanism[..end]).into_owned(),
        ));
    }
    Ok(if major > 3 { 1 } else { minor })
}

/// Greets the peer on `stream` and exchanges READY.
pub(crate) async fn handshake(
    mut stream: TcpStream,
    ours: SocketType,
    options: &Options,
) -> Result<Connection, Error> {
    let exchange = async {
        stream.write_all(&greeting()).await?;
        let mut theirs = [0u8; GREETING];
        stream.read_exact(&mut theirs).await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::Greeting("closed during the greeting".to_owned())
            } else {
                Error::Io(e)
            }
        })?;
        let minor = check_greeting(&theirs)?;
        let (read, write) = stream.into_split();
        let mut writer = Writer::new(write, minor);
        let mut ready = BytesMut::new();
        encode_ready(&mut ready, &[("Socket-Type", ours.name().as_bytes())]);
        writer.raw(&ready).await?;
        writer.flush().await?;
        // Before the peer is known it may send only its READY: a small buffer.
        let handshake_limits = Limits {
            max_frame_bytes: MAX_COMMAND_BYTES,
            max_message_bytes: MAX_COMMAND_BYTES,
            max_frames: 1,
        };
        let mut reader = Reader::new(read, handshake_limits);
        let properties = match reader.next().await? {
            Item::Command(Command::Ready(properties)) => properties,
            Item::Command(Command::Error(reason)) => return Err(Error::Refused(reason)),
            other => {
                return Err(Error::Protocol(format!(
                    "expected READY, got {}",
                    describe(&other)
                )))
            }
        };
        let property = |name: &str| {
            properties
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let socket_type = property("Socket-Type").unwrap_or_default();
        if !ours.accepts(&socket_type) {
            return Err(Error::SocketType {
                ours,
                peer: String::from_utf8_lossy(&socket_type).into_owned(),
            });
        }
        reader.set_limits(options.limits);
        Ok(Connection {
            reader,
            writer,
            peer: Peer {
                identity: property("Identity").filter(|i| !i.is_empty()),
            },
        })
    };
    tokio::time::timeout(options.handshake_timeout, exchange)
        .await
        .unwrap_or(Err(Error::HandshakeTimeout(options.handshake_timeout)))
}

fn describe(item: &Item) -> String {
    match item {
        Item::Message(frames) => format!("a message of {} frames", frames.len()),
        Item::Command(c) => format!("{c:?}"),
    }
}

/// A peer's identity as libzmq makes one up when the peer has none: a zero byte and a
/// counter.
pub(crate) fn generated_identity(n: u32) -> Bytes {
    let mut id = vec![0u8];
    id.extend_from_slice(&n.to_be_bytes());
    Bytes::from(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings_are_checked() {
        assert_eq!(check_greeting(&greeting()).unwrap(), 1);
        let mut v30 = greeting();
        v30[11] = 0;
        assert_eq!(check_greeting(&v30).unwrap(), 0);
        let mut v2 = greeting();
        v2[10] = 2;
        assert!(matches!(check_greeting(&v2), Err(Error::Greeting(_))));
        let mut curve = greeting();
        curve[12..17].copy_from_slice(b"CURVE");
        assert!(matches!(check_greeting(&curve), Err(Error::Mechanism(m)) if m == "CURVE"));
        let mut http = [0u8; GREETING];
        http[..4].copy_from_slice(b"GET ");
        assert!(matches!(check_greeting(&http), Err(Error::Greeting(_))));
    }

    #[test]
    fn socket_types_pair_as_zmtp_allows() {
        assert!(SocketType::Sub.accepts(b"PUB"));
        assert!(!SocketType::Sub.accepts(b"SUB"));
        assert!(SocketType::Router.accepts(b"DEALER"));
        assert!(!SocketType::Pub.accepts(b"DEALER"));
    }
}
