//! Tokenizing off the async workers. A model routed from KV events has its prompt tokenized, and
//! its chat template rendered, before it is routed: up to `kv_events.max_prompt_bytes` of text,
//! milliseconds of CPU that would stall every connection sharing the worker thread. Here that
//! work runs on tokio's blocking threads, at most `limits.tokenize_threads` at once, so a flood
//! of long prompts costs those threads and no more. Past `limits.tokenize_queue` requests waiting
//! for a thread, a request is routed without its tokens (from the approximate index, as when
//! tokenizing fails) rather than queue: it is served a little less precisely, never later.
//!
//! Requests for models without a tokenizer are parsed inline, as before: JSON parsing and block
//! hashing are cheap next to a hop to another thread.

use super::features::{features, finish_features, parse_body};
use super::Rejection;
use crate::metrics::{Metrics, ResultLabels};
use crate::request::{Endpoint, RequestFeatures};
use crate::state::table::Table;
use bytes::Bytes;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The bounded pool; one per router, shared by the proxy and the endpoint picker.
pub struct TokenizePool {
    threads: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_waiting: usize,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for TokenizePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenizePool")
            .field("idle_threads", &self.threads.available_permits())
            .field("waiting", &self.waiting.load(Ordering::Relaxed))
            .field("max_waiting", &self.max_waiting)
            .finish()
    }
}

/// One waiting request, counted until it has its thread or is dropped (a client gone while
/// waiting frees its place).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl TokenizePool {
    /// `threads` 0: one per CPU the process may use.
    pub fn new(threads: usize, max_waiting: usize, metrics: Arc<Metrics>) -> Self {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        Self {
            threads: Arc::new(Semaphore::new(threads)),
            waiting: AtomicUsize::new(0),
            max_waiting,
            metrics,
        }
    }

    /// The pool `limits` asks for.
    pub fn of(limits: &crate::config::LimitsConfig, metrics: Arc<Metrics>) -> Self {
        Self::new(limits.tokenize_threads, limits.tokenize_queue, metrics)
    }

    /// A thread's turn, or `None` when too many requests wait already.
    async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(permit) = self.threads.clone().try_acquire_owned() {
            return Some(permit);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let _waiting = Waiting(&self.waiting);
        self.threads.clone().acquire_owned().await.ok()
    }

    fn count(&self, result: &'static str) {
        self.metrics
            .choice
            .tokenize
            .get_or_create(&ResultLabels { result })
            .inc();
    }

    /// The request's features, as [`features`] finds them, its tokenizing done on
    /// a blocking thread of the pool (inline when its table tokenizes no model).
    pub async fn features(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        headers: &http::HeaderMap,
        table: &Arc<Table>,
    ) -> Result<RequestFeatures, Rejection> {
        if !table.tokenizes() {
            return features(endpoint, &body, headers, table);
        }
        let Some(permit) = self.turn().await else {
            self.count("busy");
            let parsed = parse_body(endpoint, &body, table, false)?;
            return finish_features(parsed, headers, table);
        };
        self.count("pooled");
        let t = table.clone();
        // The permit goes with the work: a thread already running is not given back early
        // because its client left.
        let parsed = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            parse_body(endpoint, &body, &t, true)
        })
        .await
        .map_err(|e| {
            tracing::error!("tokenizing failed: {e}");
            Rejection::before_parse(crate::errors::ApiError::internal(
                "The request could not be parsed.",
            ))
        })??;
        finish_features(parsed, headers, table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_queue_a_request_is_not_kept_waiting() {
        let pool = TokenizePool::new(1, 1, Arc::new(Metrics::new()));
        let first = pool.turn().await.expect("a free thread");
        // One may wait; the next is told at once that there is no room.
        let waiter = pool.turn();
        tokio::pin!(waiter);
        assert!(futures_util::poll!(&mut waiter).is_pending());
        assert!(pool.turn().await.is_none());
        drop(first);
        assert!(waiter.await.is_some());
        assert_eq!(pool.waiting.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_leaves_frees_its_place() {
        let pool = TokenizePool::new(1, 1, Arc::new(Metrics::new()));
        let _first = pool.turn().await.expect("a free thread");
        {
            let waiter = pool.turn();
            tokio::pin!(waiter);
            assert!(futures_util::poll!(&mut waiter).is_pending());
        }
        assert_eq!(pool.waiting.load(Ordering::Acquire), 0);
        let again = pool.turn();
        tokio::pin!(again);
        assert!(
            futures_util::poll!(&mut again).is_pending(),
            "room to wait again"
        );
    }
}
