//! One ZMTP connection after its handshake (a frame reader and a frame writer), and what every
//! socket does with connections: accept them on a bound port (at most `max_connections` at
//! once), or keep one to a connected endpoint (reconnecting with backoff), running the socket's
//! session on each and logging how it ended.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::codec::{encode_command, frame_header, Command, Decoder, Item, Limits};
use crate::endpoint::Endpoint;
use crate::handshake::{handshake, SocketType};
use crate::{Error, Options};

/// What reading asks of the buffer when it is (nearly) full: enough for many small frames per
/// read; a large frame's whole size is reserved by the decoder once its limits admitted it.
const READ_CHUNK: usize = 8 << 10;
/// A connecting socket warns of an unreachable endpoint at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// What the handshake learnt of the peer.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub identity: Option<Bytes>,
}

pub(crate) struct Connection {
    pub reader: Reader,
    pub writer: Writer,
    pub peer: Peer,
}

/// Frames in from the peer, through the limits of a [`Decoder`].
pub(crate) struct Reader {
    half: OwnedReadHalf,
    buf: BytesMut,
    decoder: Decoder,
}

impl Reader {
    pub fn new(half: OwnedReadHalf, limits: Limits) -> Self {
        Self {
            half,
            buf: BytesMut::new(),
            decoder: Decoder::new(limits),
        }
    }

    pub fn set_limits(&mut self, limits: Limits) {
        self.decoder = Decoder::new(limits);
    }

    /// The next message or command other than PING, which is answered through `out` (dropped
    /// when `out` is full: a peer that floods PINGs goes unanswered, not buffered).
    pub async fn next_answering(&mut self, out: &mpsc::Sender<Outgoing>) -> Result<Item, Error> {
        loop {
            match self.next().await? {
                Item::Command(Command::Ping { context }) => {
                    let _ = out.try_send(Outgoing::Pong(context));
                }
                item => return Ok(item),
            }
        }
    }

    /// The next message or command. Cancel-safe: what was read stays in the buffer.
    pub async fn next(&mut self) -> Result<Item, Error> {
        loop {
            if let Some(item) = self.decoder.decode(&mut self.buf)? {
                return Ok(item);
            }
            if self.buf.capacity() - self.buf.len() < READ_CHUNK / 8 {
                self.buf.reserve(READ_CHUNK);
            }
            if self.half.read_buf(&mut self.buf).await? == 0 {
                return Err(Error::Closed);
            }
        }
    }
}

/// What a session sends its peer.
#[derive(Debug, Clone)]
pub(crate) enum Outgoing {
    Message(Arc<[Bytes]>),
    Subscribe(Bytes),
    Pong(Bytes),
}

/// Frames out to the peer, buffered until [`Writer::flush`].
pub(crate) struct Writer {
    half: BufWriter<OwnedWriteHalf>,
    /// The peer's ZMTP minor version: 3.0 peers take subscriptions as messages.
    minor: u8,
}

impl Writer {
    pub fn new(half: OwnedWriteHalf, minor: u8) -> Self {
        Self {
            half: BufWriter::new(half),
            minor,
        }
    }

    pub async fn raw(&mut self, bytes: &[u8]) -> Result<(), Error> {
        Ok(self.half.write_all(bytes).await?)
    }

    pub async fn message(&mut self, frames: &[Bytes]) -> Result<(), Error> {
        for (i, frame) in frames.iter().enumerate() {
            self.raw(&frame_header(i + 1 < frames.len(), frame.len()))
                .await?;
            // Large bodies go past the buffer, uncopied.
            self.raw(frame).await?;
        }
        Ok(())
    }

    pub async fn command(&mut self, name: &str, data: &[u8]) -> Result<(), Error> {
        let mut out = BytesMut::new();
        encode_command(&mut out, name, data);
        self.raw(&out).await
    }

    pub async fn send(&mut self, outgoing: &Outgoing) -> Result<(), Error> {
        match outgoing {
            Outgoing::Message(frames) => self.message(frames).await,
            Outgoing::Subscribe(topic) if self.minor == 0 => {
                let mut body = Vec::with_capacity(1 + topic.len());
                body.push(1);
                body.extend_from_slice(topic);
                self.message(&[Bytes::from(body)]).await
            }
            Outgoing::Subscribe(topic) => self.command("SUBSCRIBE", topic).await,
            Outgoing::Pong(context) => self.command("PONG", context).await,
        }
    }

    pub async fn flush(&mut self) -> Result<(), Error> {
        Ok(self.half.flush().await?)
    }

    /// Sends what the session queues until the queue closes or the peer fails, flushing once
    /// the queue is empty.
    pub async fn drain(mut self, mut queue: mpsc::Receiver<Outgoing>) -> Result<(), Error> {
        while let Some(outgoing) = queue.recv().await {
            self.send(&outgoing).await?;
            while let Ok(outgoing) = queue.try_recv() {
                self.send(&outgoing).await?;
            }
            self.flush().await?;
        }
        Ok(())
    }
}

/// Aborts a socket's tasks (and with them its connections) when the socket is dropped.
#[derive(Default)]
pub(crate) struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    pub fn push(&mut self, task: JoinHandle<()>) {
        self.0.push(task);
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Runs `session` on every connection accepted on `endpoint`; returns the endpoint bound (its
/// port resolved) and the accepting task.
pub(crate) async fn bind<S, F>(
    endpoint: &str,
    ours: SocketType,
    options: Options,
    session: S,
) -> Result<(String, JoinHandle<()>), Error>
where
    S: Fn(Connection) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let listener = Endpoint::parse(endpoint)?.listen().await?;
    let bound = format!("tcp://{}", listener.local_addr()?);
    let task = tokio::spawn(accept(listener, ours, options, Arc::new(session)));
    Ok((bound, task))
}

async fn accept<S, F>(listener: TcpListener, ours: SocketType, options: Options, session: Arc<S>)
where
    S: Fn(Connection) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(options.max_connections));
    let options = Arc::new(options);
    // Dropped with this task: every connection ends with the socket.
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (stream, addr) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: wait rather than spin.
                tracing::warn!(error = %e, "accepting a ZMTP connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(peer = %addr, max = options.max_connections, socket = %ours, "refusing a ZMTP connection: the socket holds its maximum");
            continue;
        };
        let (options, session) = (options.clone(), session.clone());
        connections.spawn(async move {
            let _slot = slot;
            let _ = stream.set_nodelay(true);
            let ended = match handshake(stream, ours, &options).await {
                Ok(connection) => session(connection).await,
                Err(e) => Err(e),
            };
            log_end(ours, addr, ended);
        });
    }
}

/// Keeps one connection to `endpoint` (resolved again for each attempt), running `session` on
/// it, until the task is aborted.
pub(crate) fn connect<S, F>(
    endpoint: &str,
    ours: SocketType,
    options: Options,
    session: S,
) -> Result<JoinHandle<()>, Error>
where
    S: Fn(Connection) -> F + Send + Sync + 'static,
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let endpoint = Endpoint::parse(endpoint)?;
    Ok(tokio::spawn(async move {
        let mut delay = options.reconnect_min;
        let mut last_warning: Option<Instant> = None;
        loop {
            let attempt = tokio::time::timeout(options.handshake_timeout, endpoint.connect())
                .await
                .unwrap_or(Err(Error::HandshakeTimeout(options.handshake_timeout)));
            match attempt {
                Ok(stream) => {
                    let addr = stream
                        .peer_addr()
                        .unwrap_or_else(|_| ([0, 0, 0, 0], 0).into());
                    let ended = match handshake(stream, ours, &options).await {
                        Ok(connection) => {
                            delay = options.reconnect_min;
                            tracing::debug!(%endpoint, socket = %ours, "ZMTP connection established");
                            session(connection).await
                        }
                        Err(e) => Err(e),
                    };
                    log_end(ours, addr, ended);
                }
                // An endpoint down for hours neither floods the log nor goes unsaid.
                Err(e) if last_warning.is_none_or(|t| t.elapsed() >= WARN_EVERY) => {
                    last_warning = Some(Instant::now());
                    tracing::warn!(%endpoint, socket = %ours, error = %e, "cannot reach a ZMTP endpoint, retrying");
                }
                Err(e) => {
                    tracing::debug!(%endpoint, socket = %ours, error = %e, "cannot reach a ZMTP endpoint, retrying")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(options.reconnect_max);
        }
    }))
}

fn log_end(ours: SocketType, addr: SocketAddr, ended: Result<(), Error>) {
    match ended {
        Err(e) if e.is_violation() => {
            tracing::warn!(peer = %addr, socket = %ours, error = %e, "closed a ZMTP connection that broke the protocol")
        }
        Err(e) => tracing::debug!(peer = %addr, socket = %ours, "ZMTP connection ended: {e}"),
        Ok(()) => tracing::debug!(peer = %addr, socket = %ours, "ZMTP connection ended"),
    }
}

/// Runs a session's two halves until either ends: `read` (the peer's frames) and the writer
/// draining `queue`.
pub(crate) async fn run(
    read: impl Future<Output = Result<(), Error>>,
    writer: Writer,
    queue: mpsc::Receiver<Outgoing>,
) -> Result<(), Error> {
    tokio::select! {
        r = read => r,
        r = writer.drain(queue) => r,
    }
}

/// A socket's live connections, by a number each gets when it joins.
pub(crate) struct Registry<T> {
    inner: std::sync::Mutex<(u64, std::collections::HashMap<u64, T>)>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            inner: std::sync::Mutex::new((0, std::collections::HashMap::new())),
        }
    }
}

impl<T> Registry<T> {
    /// `f` over the connections, under the lock (held briefly: nothing in it awaits).
    pub fn with<R>(&self, f: impl FnOnce(&mut std::collections::HashMap<u64, T>) -> R) -> R {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inner.1)
    }

    /// Adds the connection `make` builds (under the lock, so that it sees the state the socket
    /// had when it joined); it is removed when the returned guard drops.
    pub fn join(
        self: &Arc<Self>,
        make: impl FnOnce(&std::collections::HashMap<u64, T>) -> T,
    ) -> Joined<T> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let id = inner.0;
        inner.0 += 1;
        let value = make(&inner.1);
        inner.1.insert(id, value);
        Joined {
            registry: self.clone(),
            id,
        }
    }
}

/// A connection's place in its socket's [`Registry`], given up however its session ends.
pub(crate) struct Joined<T> {
    registry: Arc<Registry<T>>,
    id: u64,
}

impl<T> Drop for Joined<T> {
    fn drop(&mut self) {
        self.registry.with(|map| map.remove(&self.id));
    }
}

/// What a socket that receives keeps: its connections' shared state `S`, the queue they fill
/// with received messages, and its tasks.
pub(crate) struct Inbound<S> {
    options: Options,
    pub shared: Arc<S>,
    tx: mpsc::Sender<Vec<Bytes>>,
    rx: mpsc::Receiver<Vec<Bytes>>,
    tasks: Tasks,
}

/// A receiving socket's session: one connection, the shared state, the queue of received
/// messages and the per-connection queue size.
pub(crate) type Serve<S, F> = fn(Connection, Arc<S>, mpsc::Sender<Vec<Bytes>>, usize) -> F;

impl<S: Default + Send + Sync + 'static> Inbound<S> {
    pub fn new(options: Options) -> Self {
        let (tx, rx) = mpsc::channel(options.queue.max(1));
        Self {
            options,
            shared: Arc::default(),
            tx,
            rx,
            tasks: Tasks::default(),
        }
    }

    pub async fn bind<F>(
        &mut self,
        endpoint: &str,
        ours: SocketType,
        serve: Serve<S, F>,
    ) -> Result<String, Error>
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        let (shared, tx, queue) = (self.shared.clone(), self.tx.clone(), self.options.queue);
        let (bound, task) = bind(endpoint, ours, self.options.clone(), move |c| {
            serve(c, shared.clone(), tx.clone(), queue)
        })
        .await?;
        self.tasks.push(task);
        Ok(bound)
    }

    pub fn connect<F>(
        &mut self,
        endpoint: &str,
        ours: SocketType,
        serve: Serve<S, F>,
    ) -> Result<(), Error>
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        let (shared, tx, queue) = (self.shared.clone(), self.tx.clone(), self.options.queue);
        let task = connect(endpoint, ours, self.options.clone(), move |c| {
            serve(c, shared.clone(), tx.clone(), queue)
        })?;
        self.tasks.push(task);
        Ok(())
    }

    pub async fn recv(&mut self) -> Result<Vec<Bytes>, Error> {
        self.rx.recv().await.ok_or(Error::SocketClosed)
    }
}
