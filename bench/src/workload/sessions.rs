//! Sessions that grow turn by turn: the machinery shared by multi-turn chat and agent loops.
//!
//! `active` sessions are open at once; requests go round-robin over them, so consecutive
//! requests of one session are `active` requests apart (the runner still waits for the previous
//! turn to finish before sending the next). A finished session is replaced by a new one. Each
//! request carries the whole conversation so far: the shared system prompt, the opening
//! message, then for every earlier turn a synthetic reply and a follow-up. Synthetic replies
//! (rather than the server's actual output) keep the sequence independent of the server, so
//! the same seed sends the same bytes to every router.

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
        }
        s.turns_sent += 1;
        Some(WorkRequest {
            session: Some(s.id),
            tenant: None,
            prompt: Prompt::Chat(s.messages.clone()),
            max_tokens: shape.output_tokens,
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
}
