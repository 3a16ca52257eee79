//! The OpenAI API as vLLM 0.32 serves it: request parsing with vLLM's validation errors, and
//! response bodies with vLLM's field sets (compared against a real engine; see the README).
//!
//! The error shape both sides share is here; parsing is in `request.rs`, bodies in `response.rs`.

use http::StatusCode;
use serde::Serialize;
use serde_json::{json, Value};

mod request;
mod response;
#[cfg(test)]
mod tests;

pub use request::{
    parse_chat, parse_completion, parse_tokenize, Bootstrap, GenerateRequest, Input,
    KvTransferParams,
};
pub use response::{
    chat_role_chunk, full_response, models, sse, token_chunk, usage, usage_chunk, Meta,
    PromptTokensDetails, Usage,
};

/// The fingerprint vLLM puts in responses; ours says it is the simulator.
pub const SYSTEM_FINGERPRINT: &str = "vllm-0.32.0-warmpath-sim";

/// An error answered in vLLM's shape:
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status} {kind}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    /// A request vLLM's schema validation rejects (FastAPI answers with type "Bad Request").
    pub fn validation(param: &str, kind: &str, msg: &str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "Bad Request",
            message: format!(
                "1 validation error:\n  {{'type': '{kind}', 'loc': '{param}', 'msg': '{msg}'}}"
            ),
            param: Some(param.to_owned()),
        }
    }

    /// A request the engine rejects after validation (type "BadRequestError"); like vLLM,
    /// the message ends with `(parameter=...)`.
    pub fn bad_request(param: Option<&str>, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if let Some(p) = param {
            message.push_str(&format!(" (parameter={p})"));
        }
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "BadRequestError",
            message,
            param: param.map(str::to_owned),
        }
    }

    /// Like [`ApiError::bad_request`], naming the offending value too.
    pub fn bad_value(param: &str, value: impl std::fmt::Display, message: &str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "BadRequestError",
            message: format!("{message} (parameter={param}, value={value})"),
            param: Some(param.to_owned()),
        }
    }

    pub fn model_not_found(model: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "NotFoundError",
            message: format!("The model `{model}` does not exist. Valid aliases: {served}."),
            param: Some("model".into()),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "InternalServerError",
            message: message.into(),
            param: None,
        }
    }

    pub fn not_found_route(path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "NotFoundError",
            message: format!("no route for {path}"),
            param: None,
        }
    }

    /// The JSON body, fields in vLLM's order.
    pub fn to_bytes(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Inner<'a> {
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'a str,
            param: Option<&'a str>,
            code: u16,
        }
        #[derive(Serialize)]
        struct Outer<'a> {
            error: Inner<'a>,
        }
        serde_json::to_vec(&Outer {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.status.as_u16(),
            },
        })
        .unwrap_or_default()
    }

    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        }})
    }
}
