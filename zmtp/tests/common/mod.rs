//! A hand-driven ZMTP peer over a raw TcpStream, to send what no well-behaved socket would.
#![allow(dead_code)]

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warmpath_zmtp::{encode_command, Decoder, Item, Limits};

/// A ZMTP 3.`minor` greeting with the NULL mechanism.
pub fn greeting(minor: u8) -> [u8; 64] {
    let mut g = [0u8; 64];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = minor;
    g[12..16].copy_from_slice(b"NULL");
    g
}

pub fn ready(socket_type: &str) -> BytesMut {
    let mut data = vec![11u8];
    data.extend_from_slice(b"Socket-Type");
    data.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    data.extend_from_slice(socket_type.as_bytes());
    let mut out = BytesMut::new();
    encode_command(&mut out, "READY", &data);
    out
}

/// A raw connection that has greeted `endpoint` and exchanged READY as `socket_type`.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    decoder: Decoder,
}

impl Raw {
    /// Around a stream of a test's own making.
    pub fn from(stream: TcpStream) -> Self {
        Self {
            stream,
            buf: BytesMut::new(),
            decoder: Decoder::new(Limits::default()),
        }
    }

    pub async fn greeted(endpoint: &str, minor: u8) -> Self {
        let addr = endpoint.strip_prefix("tcp://").unwrap();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&greeting(minor)).await.unwrap();
        let mut theirs = [0u8; 64];
        stream.read_exact(&mut theirs).await.unwrap();
        assert_eq!((theirs[0], theirs[10]), (0xFF, 3));
        Self::from(stream)
    }

    /// Greets, sends READY as `socket_type` and reads the socket's READY.
    pub async fn ready(endpoint: &str, socket_type: &str, minor: u8) -> Self {
        let mut raw = Self::greeted(endpoint, minor).await;
        raw.stream.write_all(&ready(socket_type)).await.unwrap();
        match raw.next().await {
            Some(Item::Command(warmpath_zmtp::Command::Ready(_))) => raw,
            other => panic!("expected READY, got {other:?}"),
        }
    }

    /// The next item, or `None` once the socket closed the connection.
    pub async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(item) = self.decoder.decode(&mut self.buf).unwrap() {
                return Some(item);
            }
            let read =
                tokio::time::timeout(Duration::from_secs(5), self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("the socket answers or closes within 5 s");
            match read {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// Waits for the socket to close the connection, skipping what it sends first.
    pub async fn closed(&mut self) -> bool {
        loop {
            let mut scratch = [0u8; 1024];
            match tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut scratch)).await
            {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }
}
