//! `peers`: the other replicas of this router, told of every placement as it is made.

use super::kv_events::check_endpoint;
use super::FieldPath;
use serde::Deserialize;
use std::net::Ipv6Addr;
use std::path::PathBuf;

/// Where this router tells its placements and where it hears the others'.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeersConfig {
    /// The ZMQ endpoint this router publishes its placements on (`tcp://10.0.0.7:5570`);
    /// absent: peering is off and the other fields are ignored. `${NAME}` is replaced by the
    /// environment variable `NAME` when the file is parsed, so that one file shared by every
    /// pod binds each pod's own address (`tcp://${POD_IP}:5570`; an IPv6 address is bracketed);
    /// what is kept here is the expanded endpoint.
    pub listen: Option<String>,
    /// The other routers' `listen` endpoints. A host name is resolved every
    /// `resolve_every_ms` and every address it has is followed (a headless Service's name
    /// reaches every router pod); this router's own messages, when it is among them, are
    /// recognised and skipped.
    pub routers: Vec<String>,
    /// How often host names in `routers` are resolved again.
    pub resolve_every_ms: u64,
    /// Placements waiting to be sent; past it new ones are dropped (and counted) rather than
    /// slowing the request path.
    pub queue: usize,
    /// Peers' placements remembered at once (to match their prefill-done messages); the oldest
    /// are forgotten first.
    pub max_remembered: usize,
    /// A file holding a secret every router of the group shares (at least 32 bytes; surrounding
    /// whitespace is ignored): placements are then sealed with a key derived from it (an AEAD,
    /// XChaCha20-Poly1305) and carry their send time, and placements that do not open with it,
    /// or were sent more than 30 s from this router's clock, are dropped. Absent: peering is
    /// unauthenticated (a warning at start): whoever reaches `listen` reads every placement,
    /// and whoever `routers` resolves to can inject them. Read at start; a router refuses to
    /// start when the file is unreadable or short.
    pub key_file: Option<PathBuf>,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            listen: None,
            routers: Vec::new(),
            resolve_every_ms: 10_000,
            queue: 4096,
            max_remembered: 65_536,
            key_file: None,
        }
    }
}

impl PeersConfig {
    /// Replaces the `${NAME}` references of `listen` by their values in `env` (see
    /// [`expand_env`]); done once, when the file is parsed, so that `listen` holds the endpoint
    /// bound and a reload of the same file in the same environment compares equal.
    pub(super) fn expand_listen(
        &mut self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), String> {
        if let Some(listen) = &mut self.listen {
            *listen = expand_env(listen, env)?;
        }
        Ok(())
    }

    pub(super) fn validate(&self, at: FieldPath) -> Result<(), (FieldPath, String)> {
        if let Some(l) = &self.listen {
            check_endpoint(l).map_err(|m| (at.key("listen"), m))?;
        }
        for (i, r) in self.routers.iter().enumerate() {
            let at = at.key("routers").index(i);
            if r.contains("${") {
                return Err((
                    at,
                    format!("`{r}`: `${{NAME}}` is expanded only in `peers.listen`"),
                ));
            }
            check_endpoint(r).map_err(|m| (at, m))?;
        }
        for (field, value) in [
            ("resolve_every_ms", self.resolve_every_ms),
            ("queue", self.queue as u64),
            ("max_remembered", self.max_remembered as u64),
        ] {
            if value == 0 {
                return Err((at.key(field), "must be > 0".to_owned()));
            }
        }
        Ok(())
    }
}

/// `template` with every `${NAME}` (`NAME`: a letter or `_`, then letters, digits and `_`)
/// replaced by `env(NAME)`'s value; the values are inserted as they are, never expanded in
/// turn, and a `$` not followed by `{` is kept. An IPv6 address that is the whole host of a
/// `tcp://` endpoint is put in brackets (`tcp://${POD_IP}:5570` with `fd00::1` gives
/// `tcp://[fd00::1]:5570`), as endpoints spell IPv6 hosts. Errors: a variable unset or empty, a
/// `${` without its `}`, or a name that is not one; each message names what it found.
pub(super) fn expand_env(
    template: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!(
                "`{template}`: `${{` without its closing `}}` (write `${{NAME}}`)"
            ));
        };
        let name = &after[..end];
        if !is_env_name(name) {
            return Err(format!(
                "`{template}`: `${{{name}}}` does not name an environment variable (`${{NAME}}`: a \
                 letter or `_`, then letters, digits or `_`)"
            ));
        }
        let value = env(name).filter(|v| !v.is_empty()).ok_or_else(|| {
            format!("`{template}`: the environment variable `{name}` is not set (or is empty)")
        })?;
        rest = &after[end + 1..];
        let whole_host = out == "tcp://" && (rest.is_empty() || rest.starts_with(':'));
        if whole_host && value.parse::<Ipv6Addr>().is_ok() {
            out.push('[');
            out.push_str(&value);
            out.push(']');
        } else {
            out.push_str(&value);
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
