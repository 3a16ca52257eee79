//! ZMTP frames and commands on the wire, without I/O: [`Decoder`] turns received bytes into
//! messages and commands, checking every announced length against [`Limits`] before a byte of
//! buffer is reserved for it; the `encode_*` functions write frames.
//!
//! A frame is a flags byte (bit 0 MORE, bit 1 LONG, bit 2 COMMAND, the rest reserved and
//! zero), a size (one byte, or eight big-endian bytes with LONG) and that many bytes of body. A
//! command's body is a one-byte name length, the name, and the command's data.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::Error;

const MORE: u8 = 0x01;
const LONG: u8 = 0x02;
const COMMAND: u8 = 0x04;
const RESERVED: u8 = !(MORE | LONG | COMMAND);

/// Commands are small (READY's metadata, a subscription topic, a PING context): a larger one
/// is refused whatever the message limits allow.
pub const MAX_COMMAND_BYTES: usize = 64 << 10;

/// What one received message may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_frame_bytes: usize,
    pub max_message_bytes: usize,
    pub max_frames: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame_bytes: 16 << 20,
            max_message_bytes: 16 << 20,
            max_frames: 64,
        }
    }
}

/// A command a peer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The NULL mechanism's handshake: the peer's metadata (`Socket-Type`, `Identity`, …).
    Ready(Vec<(String, Bytes)>),
    /// The peer refuses the handshake, with its reason.
    Error(String),
    /// ZMTP 3.1's subscription commands, sent by subscribers.
    Subscribe(Bytes),
    Cancel(Bytes),
    /// A heartbeat: answered with a PONG carrying the same context.
    Ping {
        context: Bytes,
    },
    Pong,
    /// A command this implementation does not use (ignored, as the RFC asks).
    Other(String),
}

impl Command {
    fn parse(body: Bytes) -> Result<Self, Error> {
        let malformed = |what: &str| Error::Protocol(format!("malformed command: {what}"));
        let Some(&len) = body.first() else {
            return Err(malformed("empty"));
        };
        let len = usize::from(len);
        if body.len() < 1 + len {
            return Err(malformed("name longer than the frame"));
        }
        let data = body.slice(1 + len..);
        Ok(match &body[1..1 + len] {
            b"READY" => Command::Ready(parse_metadata(data)?),
            b"ERROR" => {
                let reason = data
                    .split_first()
                    .map(|(n, rest)| &rest[..usize::from(*n).min(rest.len())])
                    .unwrap_or_default();
                Command::Error(String::from_utf8_lossy(reason).into_owned())
            }
            b"SUBSCRIBE" => Command::Subscribe(data),
            b"CANCEL" => Command::Cancel(data),
            b"PING" => {
                if data.len() < 2 {
                    return Err(malformed("PING without its TTL"));
                }
                // The RFC allows 16 bytes of context; a longer one is cut rather than echoed.
                let context = data.slice(2..data.len().min(2 + 16));
                Command::Ping { context }
            }
            b"PONG" => Command::Pong,
            other => Command::Other(String::from_utf8_lossy(other).into_owned()),
        })
    }
}

/// READY's metadata: properties of a one-byte name length, the name, a four-byte big-endian
/// value length and the value.
fn parse_metadata(mut data: Bytes) -> Result<Vec<(String, Bytes)>, Error> {
    let truncated = || Error::Protocol("truncated READY metadata".to_owned());
    let mut properties = Vec::new();
    while !data.is_empty() {
        let name_len = usize::from(data.get_u8());
        if data.len() < name_len + 4 {
            return Err(truncated());
        }
        let name = String::from_utf8_lossy(&data.split_to(name_len)).into_owned();
        let value_len = data.get_u32() as usize;
        if data.len() < value_len {
            return Err(truncated());
        }
        properties.push((name, data.split_to(value_len)));
    }
    Ok(properties)
}

/// A received message (its frames) or command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Message(Vec<Bytes>),
    Command(Command),
}

/// Reads frames from a byte buffer one connection fills, keeping the frames of a message
/// still arriving.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    frames: Vec<Bytes>,
    bytes: usize,
}

impl Decoder {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            frames: Vec::new(),
            bytes: 0,
        }
    }

    /// The next whole message or command in `buf` (its bytes taken out), or `None` when more
    /// must be read first; then `buf` has room reserved for the frame being read, which the
    /// limits have bounded. An error means the connection must close.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Item>, Error> {
        loop {
            let Some(&flags) = buf.first() else {
                return Ok(None);
            };
            if flags & RESERVED != 0 {
                return Err(Error::Protocol(format!(
                    "reserved flag bits set ({flags:#04x})"
                )));
            }
            let (header, announced) = if flags & LONG != 0 {
                let Some(size) = buf.get(1..9) else {
                    return Ok(None);
                };
                (9, u64::from_be_bytes(size.try_into().expect("8 bytes")))
            } else {
                let Some(&size) = buf.get(1) else {
                    return Ok(None);
                };
                (2, u64::from(size))
            };
            let command = flags & COMMAND != 0;
            let size = self.admit(command, flags & MORE != 0, announced)?;
            let whole = header + size;
            if buf.len() < whole {
                buf.reserve(whole - buf.len());
                return Ok(None);
            }
            buf.advance(header);
            let body = buf.split_to(size).freeze();
            if command {
                return Ok(Some(Item::Command(Command::parse(body)?)));
            }
            self.bytes += size;
            self.frames.push(body);
            if flags & MORE == 0 {
                self.bytes = 0;
                return Ok(Some(Item::Message(std::mem::take(&mut self.frames))));
            }
        }
    }

    /// The announced size, if the limits allow it (checked on the 64-bit value, before
    /// anything is reserved for it).
    fn admit(&self, command: bool, more: bool, announced: u64) -> Result<usize, Error> {
        let max = if command {
            if more {
                return Err(Error::Protocol("a command frame with MORE set".to_owned()));
            }
            self.limits.max_frame_bytes.min(MAX_COMMAND_BYTES)
        } else {
            if self.frames.len() >= self.limits.max_frames {
                return Err(Error::TooManyFrames {
                    max: self.limits.max_frames,
                });
            }
            self.limits.max_frame_bytes
        };
        if announced > max as u64 {
            return Err(Error::FrameTooLarge { announced, max });
        }
        // Below `max`, which is a usize.
        let size = announced as usize;
        if !command && self.bytes + size > self.limits.max_message_bytes {
            return Err(Error::MessageTooLarge {
                max: self.limits.max_message_bytes,
            });
        }
        Ok(size)
    }
}

/// A frame's header: flags and size, short when the size fits a byte.
fn put_header(out: &mut BytesMut, more: bool, command: bool, size: usize) {
    let mut flags = if more { MORE } else { 0 };
    if command {
        flags |= COMMAND;
    }
    match u8::try_from(size) {
        Ok(short) => {
            out.put_u8(flags);
            out.put_u8(short);
        }
        Err(_) => {
            out.put_u8(flags | LONG);
            out.put_u64(size as u64);
        }
    }
}

/// The header of a message frame whose body follows.
pub(crate) fn frame_header(more: bool, size: usize) -> BytesMut {
    let mut out = BytesMut::with_capacity(9);
    put_header(&mut out, more, false, size);
    out
}

/// A whole message, every frame but the last with MORE.
pub fn encode_message(out: &mut BytesMut, frames: &[impl AsRef<[u8]>]) {
    for (i, frame) in frames.iter().enumerate() {
        let frame = frame.as_ref();
        put_header(out, i + 1 < frames.len(), false, frame.len());
        out.put_slice(frame);
    }
}

/// A command frame: `name` and its data.
pub fn encode_command(out: &mut BytesMut, name: &str, data: &[u8]) {
    let name_len = u8::try_from(name.len()).expect("command names are short");
    put_header(out, false, true, 1 + name.len() + data.len());
    out.put_u8(name_len);
    out.put_slice(name.as_bytes());
    out.put_slice(data);
}

/// READY with these metadata properties.
pub(crate) fn encode_ready(out: &mut BytesMut, properties: &[(&str, &[u8])]) {
    let mut data = BytesMut::new();
    for (name, value) in properties {
        data.put_u8(u8::try_from(name.len()).expect("property names are short"));
        data.put_slice(name.as_bytes());
        data.put_u32(u32::try_from(value.len()).expect("property values are short"));
        data.put_slice(value);
    }
    encode_command(out, "READY", &data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits() -> Limits {
        Limits {
            max_frame_bytes: 1 << 20,
            max_message_bytes: 2 << 20,
            max_frames: 8,
        }
    }

    /// Decodes `wire` fed in pieces cut at `cuts`, as reads would deliver it.
    fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> Result<Vec<Item>, Error> {
        let mut decoder = Decoder::new(limits());
        let mut buf = BytesMut::new();
        let mut items = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain([&wire.len()]) {
            buf.extend_from_slice(&wire[start..end]);
            start = end;
            while let Some(item) = decoder.decode(&mut buf)? {
                items.push(item);
            }
        }
        assert!(buf.is_empty(), "bytes left over");
        Ok(items)
    }

    fn sample() -> (Vec<u8>, Vec<Item>) {
        let long = vec![7u8; 300];
        let mut wire = BytesMut::new();
        encode_message(&mut wire, &[&b"topic"[..], &[0u8; 8], &long]);
        encode_command(&mut wire, "PING", b"\x00\x0actx");
        encode_message(&mut wire, &[&b""[..]]);
        encode_command(&mut wire, "SUBSCRIBE", b"kv@");
        encode_command(&mut wire, "X-UNKNOWN", b"whatever");
        let items = vec![
            Item::Message(vec![
                Bytes::from_static(b"topic"),
                Bytes::from_static(&[0u8; 8]),
                Bytes::from(long),
            ]),
            Item::Command(Command::Ping {
                context: Bytes::from_static(b"ctx"),
            }),
            Item::Message(vec![Bytes::new()]),
            Item::Command(Command::Subscribe(Bytes::from_static(b"kv@"))),
            Item::Command(Command::Other("X-UNKNOWN".into())),
        ];
        (wire.to_vec(), items)
    }

    #[test]
    fn a_stream_split_at_every_byte_decodes_the_same() {
        let (wire, expected) = sample();
        assert_eq!(decode_in_pieces(&wire, &[]).unwrap(), expected);
        for cut in 0..=wire.len() {
            assert_eq!(decode_in_pieces(&wire, &[cut]).unwrap(), expected, "{cut}");
        }
        let every: Vec<usize> = (1..wire.len()).collect();
        assert_eq!(decode_in_pieces(&wire, &every).unwrap(), expected);
    }

    proptest! {
        #[test]
        fn any_split_of_any_messages_decodes_them(
            messages in prop::collection::vec(
                prop::collection::vec(prop::collection::vec(any::<u8>(), 0..600), 1..5),
                1..5,
            ),
            mut cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut wire = BytesMut::new();
            for m in &messages {
                encode_message(&mut wire, m);
            }
            let mut cuts: Vec<usize> = cuts.drain(..).map(|i| i.index(wire.len() + 1)).collect();
            cuts.sort_unstable();
            let items = decode_in_pieces(&wire, &cuts).unwrap();
            let expected: Vec<Item> = messages
                .iter()
                .map(|m| Item::Message(m.iter().map(|f| Bytes::copy_from_slice(f)).collect()))
                .collect();
            prop_assert_eq!(items, expected);
        }
    }

    #[test]
    fn short_and_long_headers_and_more_flags() {
        let mut out = BytesMut::new();
        encode_message(&mut out, &[&[1u8; 255][..], &[2u8; 256][..]]);
        // 255 fits the short form; 256 takes the long one. The first frame has MORE.
        assert_eq!(&out[..2], &[MORE, 255]);
        assert_eq!(&out[257..266], &[LONG, 0, 0, 0, 0, 0, 0, 1, 0]);
        // A peer may use the long form for a small frame.
        let mut buf = BytesMut::from(&[LONG, 0, 0, 0, 0, 0, 0, 0, 2, b'h', b'i'][..]);
        let item = Decoder::new(limits()).decode(&mut buf).unwrap();
        assert_eq!(item, Some(Item::Message(vec![Bytes::from_static(b"hi")])));
    }

    /// The announced length alone is refused: nothing is reserved for it (the buffer keeps
    /// the capacity it had), and no body byte needs to arrive.
    #[test]
    fn huge_announced_frames_are_refused_before_any_reservation() {
        for announced in [u64::MAX, 1 << 40, (1 << 20) + 1] {
            for flags in [LONG, LONG | MORE, LONG | COMMAND] {
                let mut buf = BytesMut::with_capacity(16);
                buf.put_u8(flags);
                buf.put_u64(announced);
                let before = buf.capacity();
                let err = Decoder::new(limits()).decode(&mut buf).unwrap_err();
                assert!(err.is_violation(), "{err}");
                assert_eq!(buf.capacity(), before, "{announced} {flags:#x}");
            }
        }
    }

    #[test]
    fn message_totals_and_frame_counts_are_bounded() {
        // Three frames of 1 MiB: the third passes the frame limit but not the 2 MiB total.
        let mut decoder = Decoder::new(limits());
        let mut buf = BytesMut::new();
        for _ in 0..2 {
            put_header(&mut buf, true, false, 1 << 20);
            buf.put_bytes(0, 1 << 20);
        }
        put_header(&mut buf, false, false, 1 << 20);
        let before = buf.capacity();
        assert!(matches!(
            decoder.decode(&mut buf),
            Err(Error::MessageTooLarge { .. })
        ));
        // The two whole frames were taken out; nothing was added for the third.
        assert!(buf.capacity() <= before);
        // Nine empty frames with MORE: the ninth is one too many.
        let mut decoder = Decoder::new(limits());
        let mut buf = BytesMut::from(&[MORE, 0].repeat(9)[..]);
        assert!(matches!(
            decoder.decode(&mut buf),
            Err(Error::TooManyFrames { max: 8 })
        ));
    }

    #[test]
    fn malformed_frames_and_commands_are_errors() {
        for wire in [
            &[0x08u8, 0][..],                                            // a reserved bit
            &[COMMAND | MORE, 1, 0][..],                                 // a command with MORE
            &[COMMAND, 0][..],                                           // an empty command
            &[COMMAND, 3, 5, b'R', b'E'][..], // a name longer than its frame
            &[COMMAND, 6, 4, b'P', b'I', b'N', b'G', 0][..], // PING without its TTL
            &[COMMAND, 8, 5, b'R', b'E', b'A', b'D', b'Y', 3, b'a'][..], // truncated metadata
        ] {
            let mut buf = BytesMut::from(wire);
            let got = Decoder::new(limits()).decode(&mut buf);
            assert!(matches!(got, Err(Error::Protocol(_))), "{wire:?}: {got:?}");
        }
        let mut big_command = BytesMut::new();
        put_header(&mut big_command, false, true, MAX_COMMAND_BYTES + 1);
        assert!(matches!(
            Decoder::new(limits()).decode(&mut big_command),
            Err(Error::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn ready_metadata_round_trips() {
        let mut out = BytesMut::new();
        encode_ready(&mut out, &[("Socket-Type", b"SUB"), ("Identity", b"")]);
        let item = Decoder::new(limits()).decode(&mut out).unwrap();
        assert_eq!(
            item,
            Some(Item::Command(Command::Ready(vec![
                ("Socket-Type".into(), Bytes::from_static(b"SUB")),
                ("Identity".into(), Bytes::new()),
            ])))
        );
    }
}
