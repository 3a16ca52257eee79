//! DEALER: one connection to a bound ROUTER (vLLM's replay endpoint), sending and receiving
//! in turn. It does not reconnect: a replay is one short exchange, retried by its caller.

use bytes::Bytes;

use crate::codec::{Command, Item};
use crate::connection::{Outgoing, Reader, Writer};
use crate::endpoint::Endpoint;
use crate::handshake::{handshake, SocketType};
use crate::{Error, Options};

/// A DEALER socket.
pub struct DealerSocket {
    reader: Reader,
    writer: Writer,
}

impl DealerSocket {
    /// Connects to `endpoint` and completes the handshake (within the handshake timeout).
    pub async fn connect(endpoint: &str, options: Options) -> Result<Self, Error> {
        let endpoint = Endpoint::parse(endpoint)?;
        let stream = tokio::time::timeout(options.handshake_timeout, endpoint.connect())
            .await
            .unwrap_or(Err(Error::HandshakeTimeout(options.handshake_timeout)))?;
        let connection = handshake(stream, SocketType::Dealer, &options).await?;
        Ok(Self {
            reader: connection.reader,
            writer: connection.writer,
        })
    }

    pub async fn send(&mut self, frames: &[Bytes]) -> Result<(), Error> {
        self.writer.message(frames).await?;
        self.writer.flush().await
    }

    /// The next message, answering PINGs meanwhile. Cancelling it may leave a PONG half
    /// written: drop the socket then.
    pub async fn recv(&mut self) -> Result<Vec<Bytes>, Error> {
        loop {
            match self.reader.next().await? {
                Item::Message(frames) => return Ok(frames),
                Item::Command(Command::Ping { context }) => {
                    self.writer.send(&Outgoing::Pong(context)).await?;
                    self.writer.flush().await?;
                }
                Item::Command(_) => {}
            }
        }
    }
}
