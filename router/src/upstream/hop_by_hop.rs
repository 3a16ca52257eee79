//! Headers that describe one hop, not the message (RFC 9110 §7.6.1): dropped from what the
//! router passes on, both ways, by the proxy and by the P/D sidecar.

use http::header::{self, HeaderMap, HeaderName};

/// Headers that describe one hop, not the message (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Drop hop-by-hop headers (and `host`, when asked) in place, with the ones `Connection` names
/// (RFC 9110 §7.6.1: a sender may mark any header as meant for the next hop only). The map is
/// moved or cloned whole rather than rebuilt entry by entry: most messages carry none of these,
/// and a look costs less than re-inserting every header.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap, host_too: bool) {
    let is_hop =
        |name: &HeaderName| HOP_BY_HOP.contains(name) || (host_too && name == header::HOST);
    if headers.keys().any(is_hop) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
            .collect();
        for name in &named {
            headers.remove(name);
        }
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
        if host_too {
            headers.remove(header::HOST);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn hop_by_hop_headers_go_and_the_rest_stay() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(header::HOST, HeaderValue::from_static("client.example"));
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        let untouched = h.clone();
        strip_hop_by_hop(&mut h, false);
        assert_eq!(h, untouched, "nothing to strip: the map is as it was");

        h.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        strip_hop_by_hop(&mut h, false);
        assert_eq!(
            h, untouched,
            "a request keeps its host (replaced when sent)"
        );
        strip_hop_by_hop(&mut h, true);
        assert!(!h.contains_key(header::HOST));
        assert_eq!(h.len(), 2);

        // Headers that `Connection` names are for this hop only.
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, X-Secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("internal"));
        strip_hop_by_hop(&mut h, false);
        assert!(!h.contains_key("x-secret"), "{h:?}");
        assert_eq!(h.len(), 2);
    }
}
