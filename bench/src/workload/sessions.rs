//! Sessions that grow turn by turn: the machinery shared by multi-turn chat and agent loops.
//!
//! `active` sessions are open at once; requests go round-robin over them, so consecutive
//! requests of one session are `active` requests apart (the runner still waits for the previous
//! turn to finish before sending the next). A finished session is replaced by a new one. Each
//! request carries the whole conversation so far: the shared system prompt, the opening
//! message, then for every earlier turn a synthetic reply and a follow-up. Synthetic replies
//! (rather than the server's actual output) keep the sequence independent of the server, so
//! the same seed sends the same bytes to every router.
//!
//! [`Rewrites`] make a session's context change other than by growing at its end, as agents'
//! contexts do: a tool result that arrives late is spliced in mid-history, and every few turns
//! the history is compacted into a summary. Both keep roles alternating (a spliced exchange is a
//! reply and a follow-up, a summary takes the opening's place), so every chat template accepts
//! the result.

use serde::{Deserialize, Serialize};

use super::{Message, Prompt, WorkRequest};
use crate::rng::Rng64;
use crate::text;

#[derive(Debug, Clone)]
pub(crate) struct SessionShape {
    pub active: u32,
    pub turns: u32,
    pub system_tokens: u32,
    pub opening_tokens: u32,
    pub reply_tokens: u32,
    pub followup_tokens: u32,
    pub output_tokens: u32,
    /// Separates the streams of different workloads that use this machinery.
    pub stream_tag: u64,
    pub rewrites: Rewrites,
}

/// How a session's context is rewritten (every field 0: never). Counted in turns since the
/// session opened; a turn that is due for both is compacted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rewrites {
    /// Every N-th turn, one more exchange (a reply and a follow-up) is spliced in at the middle
    /// of the history instead of the end: what was cached past that point no longer matches.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub insert_every: u32,
    /// Every N-th turn, the history after the system prompt is replaced by a summary and the
    /// latest exchange: only the system prompt still matches anything cached.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compact_every: u32,
    /// Tokens of a compaction's summary.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub summary_tokens: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// Whether turn `turn` (1 = the first follow-up) is due under a rewrite every `every` turns.
fn due(every: u32, turn: u32) -> bool {
    every > 0 && turn.is_multiple_of(every)
}

impl SessionShape {
    /// Tokens of one session at its last turn.
    pub fn final_tokens(&self) -> u64 {
        u64::from(self.system_tokens)
            + u64::from(self.opening_tokens)
            + u64::from(self.turns.saturating_sub(1))
                * u64::from(self.reply_tokens + self.followup_tokens)
    }

    /// Live reusable prefix: the shared system prompt once, plus every open session's history,
    /// on average half grown.
    pub fn prefix_working_set(&self) -> u64 {
        let per_session = self.final_tokens() - u64::from(self.system_tokens);
        u64::from(self.system_tokens) + u64::from(self.active) * per_session.div_ceil(2)
    }
}

struct Session {
    id: u64,
    messages: Vec<Message>,
    turns_sent: u32,
    rng: Rng64,
}

pub(crate) fn stream(
    shape: SessionShape,
    seed: u64,
    reply_role: &'static str,
    followup_role: &'static str,
) -> impl Iterator<Item = WorkRequest> + Send {
    let system = text::words(
        &mut Rng64::derive(seed, shape.stream_tag),
        shape.system_tokens as usize,
    );
    let new_session = {
        let shape = shape.clone();
        move |id: u64| {
            let mut rng = Rng64::derive(seed, shape.stream_tag + 1 + id);
            let opening = text::words(&mut rng, shape.opening_tokens as usize);
            Session {
                id,
                messages: vec![
                    Message::new("system", system.clone()),
                    Message::new("user", opening),
                ],
                turns_sent: 0,
                rng,
            }
        }
    };
    let active = shape.active.max(1) as usize;
    let mut slots: Vec<Session> = (0..active as u64).map(&new_session).collect();
    let mut next_id = active as u64;
    let mut cursor = 0usize;
    std::iter::from_fn(move || {
        let slot = cursor;
        cursor = (cursor + 1) % active;
        if slots[slot].turns_sent >= shape.turns.max(1) {
            slots[slot] = new_session(next_id);
            next_id += 1;
        }
        let s = &mut slots[slot];
        if s.turns_sent > 0 {
            let reply = text::words(&mut s.rng, shape.reply_tokens as usize);
            let followup = text::words(&mut s.rng, shape.followup_tokens as usize);
            s.messages.push(Message::new(reply_role, reply));
            s.messages.push(Message::new(followup_role, followup));
            let rw = &shape.rewrites;
            if due(rw.compact_every, s.turns_sent) {
                let summary = text::words(&mut s.rng, rw.summary_tokens as usize);
                let latest = s.messages.split_off(s.messages.len() - 2);
                s.messages.truncate(1);
                s.messages.push(Message::new("user", summary));
                s.messages.extend(latest);
            } else if due(rw.insert_every, s.turns_sent) {
                // Exchanges start after the system prompt and the opening, two messages each;
                // the splice goes to the middle of the context the previous turn sent.
                let earlier = (s.messages.len() - 2) / 2 - 1;
                let at = 2 + 2 * (earlier / 2);
                let call = text::words(&mut s.rng, shape.reply_tokens as usize);
                let result = text::words(&mut s.rng, shape.followup_tokens as usize);
                s.messages.insert(at, Message::new(reply_role, call));
                s.messages
                    .insert(at + 1, Message::new(followup_role, result));
            }
        }
        s.turns_sent += 1;
        Some(WorkRequest {
            session: Some(s.id),
            tenant: None,
            prompt: Prompt::Chat(s.messages.clone()),
            max_tokens: shape.output_tokens,
            arrival: None,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> SessionShape {
        SessionShape {
            active: 3,
            turns: 4,
            system_tokens: 10,
            opening_tokens: 5,
            reply_tokens: 6,
            followup_tokens: 7,
            output_tokens: 8,
            stream_tag: 0x100,
            rewrites: Rewrites::default(),
        }
    }

    #[test]
    fn sessions_grow_by_one_turn_and_round_robin() {
        let reqs: Vec<_> = stream(shape(), 1, "assistant", "user").take(15).collect();
        // Round-robin over 3 sessions: request i belongs to session i % 3 for the first 4 turns.
        for (i, r) in reqs.iter().take(12).enumerate() {
            assert_eq!(r.session, Some((i % 3) as u64));
            let Prompt::Chat(m) = &r.prompt else { panic!() };
            let turn = i / 3;
            assert_eq!(m.len(), 2 + 2 * turn);
            if turn > 0 {
                // The previous turn's conversation is a strict prefix of this one.
                let Prompt::Chat(prev) = &reqs[i - 3].prompt else {
                    panic!()
                };
                assert_eq!(&m[..prev.len()], &prev[..]);
                assert_eq!(m[m.len() - 2].role, "assistant");
                assert_eq!(m[m.len() - 2].content.len(), 6 * 4);
                assert_eq!(m[m.len() - 1].content.len(), 7 * 4);
            }
        }
        // After 4 turns each slot starts a new session with a fresh id.
        assert_eq!(reqs[12].session, Some(3));
        let Prompt::Chat(m) = &reqs[12].prompt else {
            panic!()
        };
        assert_eq!(m.len(), 2);
        // Every session shares the system prompt, and openings differ.
        let Prompt::Chat(first) = &reqs[0].prompt else {
            panic!()
        };
        assert_eq!(m[0], first[0]);
        assert_ne!(m[1], first[1]);
    }

    #[test]
    fn working_set_counts_the_system_prompt_once() {
        let s = shape();
        assert_eq!(s.final_tokens(), 10 + 5 + 3 * 13);
        assert_eq!(s.prefix_working_set(), 10 + 3 * (5 + 39_u64).div_ceil(2));
    }

    #[test]
    fn rewrites_splice_mid_history_and_compact() {
        let shape = SessionShape {
            active: 1,
            turns: 7,
            rewrites: Rewrites {
                insert_every: 2,
                compact_every: 3,
                summary_tokens: 9,
            },
            ..shape()
        };
        let reqs: Vec<Vec<Message>> = stream(shape, 1, "assistant", "user")
            .take(7)
            .map(|r| match r.prompt {
                Prompt::Chat(m) => m,
                Prompt::Text(_) => panic!(),
            })
            .collect();
        let alternates = |m: &[Message]| {
            m[1..]
                .iter()
                .enumerate()
                .all(|(i, x)| x.role == if i % 2 == 0 { "user" } else { "assistant" })
        };
        for m in &reqs {
            assert_eq!(m[0].role, "system");
            assert!(alternates(m), "{m:?}");
        }
        // Turn 1 grows at the end.
        assert_eq!(reqs[1].len(), 4);
        assert_eq!(&reqs[1][..2], &reqs[0][..]);
        // Turn 2 (due for a splice): the new exchange at the end, one more mid-history, so only
        // the system prompt and the opening still match turn 1's context.
        assert_eq!(reqs[2].len(), 8);
        assert_eq!(&reqs[2][..2], &reqs[1][..2]);
        assert_ne!(reqs[2][2], reqs[1][2]);
        assert_eq!(&reqs[2][4..6], &reqs[1][2..4]);
        // Turn 3 (due for a compaction): system prompt, a 9-token summary, the latest exchange.
        assert_eq!(reqs[3].len(), 4);
        assert_eq!(reqs[3][0], reqs[0][0]);
        assert_eq!(reqs[3][1].content.len(), 9 * 4);
        // Turn 4 (a splice again): grows on from the compacted context.
        assert_eq!(&reqs[4][..2], &reqs[3][..2]);
        // Turn 6 is due for both: compacted.
        assert_eq!(reqs[6].len(), 4);
    }
}
