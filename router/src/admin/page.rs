//! The status page: one HTML document embedded in the binary (no external assets: admin ports
//! are often reached through a port-forward with no internet behind it). Its script polls
//! `/api/status` and `/api/decisions` every second and redraws; when the admin token is set it
//! asks for it once and keeps it in the tab's session storage.

use crate::errors::{full_body, RespBody};
use http::{header, HeaderValue, Response};

const PAGE: &str = include_str!("status.html");

pub(super) fn response() -> Response<RespBody> {
    let mut resp = Response::new(full_body(PAGE));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // Everything the page runs is in it: nothing else may load, inline script and style
    // excepted, and it may only talk to this listener.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
