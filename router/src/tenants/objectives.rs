//! Request objectives: the priority band a request gets by naming an objective
//! (`x-llm-d-inference-objective`, or llm-d's older `x-gateway-inference-objective`), as llm-d's
//! InferenceObjectives give one.
//!
//! An [`Objectives`] is built with each routing table from the `objectives:` configuration (the
//! file's and, in Kubernetes mode, the InferenceObjectives found). An objective changes only the
//! request's priority band (and, when negative, makes it sheddable): the tenant, its fair share,
//! limits and queue bounds stay the tenant's. A name no objective has is not an error: the
//! request keeps its tenant's priority (llm-d gives it the default priority).

use crate::config::{is_token, ObjectiveConfig};
use http::HeaderMap;
use std::collections::HashMap;
use std::sync::Arc;

/// The headers that name a request's objective, first present wins (llm-d's
/// `metadata.ObjectiveKey` and its deprecated alias).
pub const OBJECTIVE_HEADERS: [&str; 2] = [
    "x-llm-d-inference-objective",
    "x-gateway-inference-objective",
];

/// The objective a request names in its headers, if any. Callers honour it only from trusted
/// peers ([`crate::tenants::Directory::objective`]).
pub(super) fn named_objective(headers: &HeaderMap) -> Option<&str> {
    OBJECTIVE_HEADERS
        .iter()
        .find_map(|h| headers.get(*h))
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| is_token(v))
}

/// A known objective as a request resolved it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Objective {
    pub name: Arc<str>,
    pub priority: i32,
}

#[derive(Debug, Default)]
struct Entry {
    /// The objective for models not named below.
    every: Option<Objective>,
    per_model: HashMap<Box<str>, Objective>,
}

/// The objectives of one routing table, by name and model.
#[derive(Debug, Default)]
pub struct Objectives {
    by_name: HashMap<Box<str>, Entry>,
}

impl Objectives {
    /// From a validated configuration (a name and model given twice: the first wins).
    pub fn new(config: &[ObjectiveConfig]) -> Self {
        let mut by_name: HashMap<Box<str>, Entry> = HashMap::new();
        for o in config {
            let entry = by_name.entry(Box::from(o.name.as_str())).or_default();
            let objective = Objective {
                name: Arc::from(o.name.as_str()),
                priority: o.priority,
            };
            if o.models.is_empty() {
                entry.every.get_or_insert(objective);
            } else {
                for m in &o.models {
                    entry
                        .per_model
                        .entry(Box::from(m.as_str()))
                        .or_insert_with(|| objective.clone());
                }
            }
        }
        Self { by_name }
    }

    /// Whether there are none (then a request's objective header is not even looked at).
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The objective `name` for a request to `model`: the one given for that model, else the one
    /// given for every model.
    pub fn get(&self, name: &str, model: &str) -> Option<&Objective> {
        let e = self.by_name.get(name)?;
        e.per_model.get(model).or(e.every.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn objective(name: &str, priority: i32, models: &[&str]) -> ObjectiveConfig {
        ObjectiveConfig {
            name: name.to_owned(),
            priority,
            models: models.iter().map(|m| m.to_string()).collect(),
        }
    }

    #[test]
    fn an_objective_applies_to_its_models_and_a_general_one_to_the_rest() {
        let o = Objectives::new(&[
            objective("chat", 10, &["llama"]),
            objective("chat", 2, &[]),
            objective("batch", -1, &["llama", "qwen"]),
        ]);
        assert_eq!(o.get("chat", "llama").unwrap().priority, 10);
        assert_eq!(o.get("chat", "qwen").unwrap().priority, 2);
        assert_eq!(o.get("batch", "qwen").unwrap().priority, -1);
        assert_eq!(o.get("batch", "mistral"), None, "batch names no such model");
        assert_eq!(o.get("unknown", "llama"), None);
        assert!(!o.is_empty());
        assert!(Objectives::new(&[]).is_empty());
    }

    #[test]
    fn the_objective_header_and_its_older_name() {
        let mut h = HeaderMap::new();
        assert_eq!(named_objective(&h), None);
        h.insert(
            "x-gateway-inference-objective",
            HeaderValue::from_static("old"),
        );
        assert_eq!(named_objective(&h), Some("old"));
        h.insert(
            "x-llm-d-inference-objective",
            HeaderValue::from_static(" new "),
        );
        assert_eq!(named_objective(&h), Some("new"), "the current name wins");
        h.insert("x-llm-d-inference-objective", HeaderValue::from_static(""));
        assert_eq!(named_objective(&h), None, "an empty name names nothing");
    }
}
