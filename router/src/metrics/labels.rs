//! Label sets of the router's series. Values come from the configuration (model, pool and
//! replica names) or fixed sets (status codes, reasons), never from raw client input.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub model: String,
    pub pool: String,
    pub replica: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub model: String,
    pub pool: String,
    pub replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicaLabels {
    pub replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub replica: String,
    /// `connect` (refused, unreachable), `connect_timeout`, `local` (this process could not
    /// open a socket), `timeout`, `idle`, `body`, `other`, `unavailable` (a 502/503 answer).
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

/// What became of a placement message to or from the other routers (`peers`): `sent`,
/// `dropped` (the send queue was full), `placed`, `prefilled` (received and applied), `own`,
/// `unknown_replica`, `other_hashing`, `undecodable`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabels {
    pub kind: &'static str,
}

/// What a KV-event message or event did (`stored`, `removed`, `cleared`, `gap`, `restart`,
/// `unknown_parent`, `malformed`, `undecodable`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KvEventLabels {
    pub kind: &'static str,
}
