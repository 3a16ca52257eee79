//! Incremental server-sent-events parsing and the meaning of OpenAI streaming chunks.
//!
//! Bytes arrive in arbitrary pieces (a chunk may hold half an event or several); [`SseParser`]
//! buffers at most one incomplete line plus the data of one event, and returns whole events.
//! [`Chunk::parse`] reads what a benchmark needs from one `data:` payload: whether it carries
//! generated text (a token arrival), the usage block, or an error.

use thiserror::Error;

/// Limit on one event's data, so a server that never ends an event cannot grow memory without
/// bound.
pub const MAX_EVENT_BYTES: usize = 4 << 20;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum SseError {
    #[error("event larger than {MAX_EVENT_BYTES} bytes")]
    EventTooLarge,
    #[error("event data is not UTF-8")]
    NotUtf8,
}

/// Parser state: the unfinished line and the data lines of the current event.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the data of every event completed by them, in order.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        while let Some(nl) = bytes.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&bytes[..nl]);
            bytes = &bytes[nl + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(ev) = self.line_done(&line)? {
                events.push(ev);
            }
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
            return Err(SseError::EventTooLarge);
        }
        Ok(events)
    }

    /// Whether bytes of an unfinished event are buffered (a stream that ends here was cut).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<String>, SseError> {
        if line.is_empty() {
            if !self.has_data {
                return Ok(None);
            }
            self.has_data = false;
            let data = std::mem::take(&mut self.data);
            return String::from_utf8(data)
                .map(Some)
                .map_err(|_| SseError::NotUtf8);
        }
        if line[0] == b':' {
            return Ok(None); // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
            if self.data.len() > MAX_EVENT_BYTES {
                return Err(SseError::EventTooLarge);
            }
        }
        Ok(None)
    }
}

/// Token counts reported by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What one streamed payload means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// The `[DONE]` sentinel.
    Done,
    /// A completion or chat chunk.
    Data {
        /// Generated text in this chunk (`choices[].text` or `choices[].delta.content`).
        text_bytes: usize,
        usage: Option<Usage>,
    },
    /// An error object sent in the stream.
    Error(String),
}

impl Chunk {
    /// Parses one event's data. `Err` holds why the payload is malformed.
    pub fn parse(data: &str) -> Result<Chunk, String> {
        if data.trim() == "[DONE]" {
            return Ok(Chunk::Done);
        }
        let v: serde_json::Value =
            serde_json::from_str(data).map_err(|e| format!("chunk is not JSON: {e}"))?;
        if let Some(err) = v.get("error") {
            let msg = err
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
                .unwrap_or_else(|| err.to_string());
            return Ok(Chunk::Error(msg));
        }
        let choices = v.get("choices").and_then(|c| c.as_array());
        let usage = v.get("usage").filter(|u| !u.is_null());
        if choices.is_none() && usage.is_none() {
            return Err("chunk has neither choices nor usage".to_owned());
        }
        let text_bytes = choices
            .into_iter()
            .flatten()
            .map(|c| {
                let text = c
                    .get("text")
                    .or_else(|| c.get("delta").and_then(|d| d.get("content")));
                text.and_then(|t| t.as_str()).map_or(0, str::len)
            })
            .sum();
        let usage = usage.map(|u| {
            let n = |k: &str| u.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
            Usage {
                prompt_tokens: n("prompt_tokens"),
                completion_tokens: n("completion_tokens"),
            }
        });
        Ok(Chunk::Data { text_bytes, usage })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let stream = b"data: {\"a\":1}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut p = SseParser::new();
            let mut got = p.feed(&stream[..split]).unwrap();
            got.extend(p.feed(&stream[split..]).unwrap());
            assert_eq!(got, vec!["{\"a\":1}", "x\ny", "[DONE]"], "split at {split}");
            assert!(!p.has_partial());
        }
    }

    #[test]
    fn field_without_space_and_other_fields() {
        let mut p = SseParser::new();
        let got = p.feed(b"event: message\nid: 3\ndata:abc\n\n").unwrap();
        assert_eq!(got, vec!["abc"]);
    }

    #[test]
    fn partial_event_is_reported() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: {\"choices\"").unwrap().is_empty());
        assert!(p.has_partial());
        let mut p = SseParser::new();
        assert!(p.feed(b"data: x\n").unwrap().is_empty());
        assert!(p.has_partial());
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut p = SseParser::new();
        let big = vec![b'a'; MAX_EVENT_BYTES + 1];
        assert_eq!(p.feed(&big), Err(SseError::EventTooLarge));
    }

    #[test]
    fn completion_chat_usage_done_and_error_chunks() {
        assert_eq!(
            Chunk::parse(r#"{"choices":[{"index":0,"text":" hello"}]}"#),
            Ok(Chunk::Data {
                text_bytes: 6,
                usage: None
            })
        );
        assert_eq!(
            Chunk::parse(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#),
            Ok(Chunk::Data {
                text_bytes: 0,
                usage: None
            })
        );
        assert_eq!(
            Chunk::parse(r#"{"choices":[{"delta":{"content":"ab"}}],"usage":null}"#),
            Ok(Chunk::Data {
                text_bytes: 2,
                usage: None
            })
        );
        assert_eq!(
            Chunk::parse(
                r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}"#
            ),
            Ok(Chunk::Data {
                text_bytes: 0,
                usage: Some(Usage {
                    prompt_tokens: 12,
                    completion_tokens: 5
                })
            })
        );
        assert_eq!(Chunk::parse(" [DONE]"), Ok(Chunk::Done));
        assert_eq!(
            Chunk::parse(r#"{"error":{"message":"boom","type":"x"}}"#),
            Ok(Chunk::Error("boom".into()))
        );
        assert!(Chunk::parse("not json").is_err());
        assert!(Chunk::parse("{}").is_err());
    }
}
