//! PUB: sends each message to every subscriber whose subscriptions match its first frame.
//! Each subscriber has its own bounded queue; when a subscriber does not keep up, its
//! messages are dropped and the publisher and the other subscribers carry on.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::codec::{Command, Item, Limits, MAX_COMMAND_BYTES};
use crate::connection::{self, Connection, Outgoing, Registry, Tasks};
use crate::handshake::SocketType;
use crate::{Error, Options};

/// Subscriptions one subscriber may hold: a subscriber asking for more is cut off rather than
/// growing the publisher's memory.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// A PUB socket.
pub struct PubSocket {
    options: Options,
    subscribers: Arc<Registry<Subscriber>>,
    tasks: Tasks,
}

struct Subscriber {
    out: mpsc::Sender<Outgoing>,
    topics: Arc<Mutex<Vec<Bytes>>>,
}

impl PubSocket {
    pub fn new(mut options: Options) -> Self {
        // A subscriber sends only subscriptions: nothing of it needs the message limits.
        options.limits = Limits {
            max_frame_bytes: options.limits.max_frame_bytes.min(MAX_COMMAND_BYTES),
            max_message_bytes: options.limits.max_message_bytes.min(MAX_COMMAND_BYTES),
            max_frames: options.limits.max_frames.min(16),
        };
        Self {
            options,
            subscribers: Arc::default(),
            tasks: Tasks::default(),
        }
    }

    /// Accepts subscribers on `endpoint` (port 0 picks one); returns the endpoint bound.
    pub async fn bind(&mut self, endpoint: &str) -> Result<String, Error> {
        let (subscribers, queue) = (self.subscribers.clone(), self.options.queue);
        let (bound, task) =
            connection::bind(endpoint, SocketType::Pub, self.options.clone(), move |c| {
                serve(c, subscribers.clone(), queue)
            })
            .await?;
        self.tasks.push(task);
        Ok(bound)
    }

    /// Connects to a subscriber bound at `endpoint`, in the background and again whenever the
    /// connection fails; only a malformed endpoint is an error here.
    pub fn connect(&mut self, endpoint: &str) -> Result<(), Error> {
        let (subscribers, queue) = (self.subscribers.clone(), self.options.queue);
        let task =
            connection::connect(endpoint, SocketType::Pub, self.options.clone(), move |c| {
                serve(c, subscribers.clone(), queue)
            })?;
        self.tasks.push(task);
        Ok(())
    }

    /// Queues the message for every subscriber that wants it, never waiting; returns how many
    /// took it (the others had no matching subscription or a full queue).
    pub fn send(&self, frames: Vec<Bytes>) -> usize {
        let Some(topic) = frames.first().cloned() else {
            return 0;
        };
        let message: Arc<[Bytes]> = frames.into();
        self.subscribers.with(|subscribers| {
            subscribers
                .values()
                .filter(|s| {
                    let topics = s.topics.lock().unwrap_or_else(|e| e.into_inner());
                    topics.iter().any(|t| topic.starts_with(t))
                })
                .filter(|s| s.out.try_send(Outgoing::Message(message.clone())).is_ok())
                .count()
        })
    }

    /// Subscribers connected now (whatever their subscriptions).
    pub fn subscribers(&self) -> usize {
        self.subscribers.with(|s| s.len())
    }
}

async fn serve(
    connection: Connection,
    subscribers: Arc<Registry<Subscriber>>,
    queue: usize,
) -> Result<(), Error> {
    let Connection {
        mut reader, writer, ..
    } = connection;
    let (out, pending) = mpsc::channel(queue.max(1));
    let topics = Arc::new(Mutex::new(Vec::<Bytes>::new()));
    let _joined = subscribers.join(|_| Subscriber {
        out: out.clone(),
        topics: topics.clone(),
    });
    let read = async {
        loop {
            let (subscribe, topic) = match reader.next_answering(&out).await? {
                // ZMTP 3.0's subscriptions: one frame, 1 (subscribe) or 0 (cancel) and a topic.
                Item::Message(frames) => match frames.as_slice() {
                    [only] if only.first() == Some(&1) => (true, only.slice(1..)),
                    [only] if only.first() == Some(&0) => (false, only.slice(1..)),
                    // A subscriber has nothing else to say; ignored as libzmq does.
                    _ => continue,
                },
                Item::Command(Command::Subscribe(topic)) => (true, topic),
                Item::Command(Command::Cancel(topic)) => (false, topic),
                Item::Command(_) => continue,
            };
            let mut topics = topics.lock().unwrap_or_else(|e| e.into_inner());
            if subscribe {
                if topics.len() >= MAX_SUBSCRIPTIONS {
                    return Err(Error::TooManySubscriptions {
                        max: MAX_SUBSCRIPTIONS,
                    });
                }
                topics.push(topic);
            } else if let Some(i) = topics.iter().position(|t| *t == topic) {
                topics.swap_remove(i);
            }
        }
    };
    connection::run(read, writer, pending).await
}
