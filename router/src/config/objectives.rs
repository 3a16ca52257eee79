//! The `objectives:` section: named request objectives (llm-d's InferenceObjectives) and the
//! priority band a request naming one gets in flow control.

use super::{is_token, FieldPath};
use serde::Deserialize;
use std::collections::{HashMap, HashSet};

/// Objectives a configuration may name (each is a small map entry per model it names).
pub const MAX_OBJECTIVES: usize = 1000;

/// One objective: requests naming it (`x-llm-d-inference-objective`) are queued in its priority
/// band instead of their tenant's.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ObjectiveConfig {
    /// The header value that names it.
    pub name: String,
    /// Priority band (-1000 to 1000): higher is served first; negative is sheddable. llm-d's
    /// default, 0, when absent.
    pub priority: i32,
    /// The models it applies to; empty: every model. The same name may be given again for
    /// other models (with another priority).
    pub models: Vec<String>,
}

/// Checks `objectives` (at `at`): names, priorities, and that no request could name two of them
/// (a name given twice must name disjoint models, and at most one of them every model).
pub(super) fn validate(
    objectives: &[ObjectiveConfig],
    at: FieldPath,
) -> Result<(), (FieldPath, String)> {
    if objectives.len() > MAX_OBJECTIVES {
        return Err((at, format!("at most {MAX_OBJECTIVES} objectives")));
    }
    // Per name: whether one entry covers every model, and the models named so far.
    let mut seen: HashMap<&str, (bool, HashSet<&str>)> = HashMap::new();
    for (i, o) in objectives.iter().enumerate() {
        let oi = at.index(i);
        if !is_token(&o.name) {
            return Err((
                oi.key("name"),
                "must be printable ASCII without spaces (1-256 characters)".to_owned(),
            ));
        }
        if !(-1000..=1000).contains(&o.priority) {
            return Err((
                oi.key("priority"),
                "must be between -1000 and 1000".to_owned(),
            ));
        }
        if o.models.len() > MAX_OBJECTIVES {
            return Err((oi.key("models"), format!("at most {MAX_OBJECTIVES} models")));
        }
        let (every, models) = seen.entry(o.name.as_str()).or_default();
        if o.models.is_empty() {
            if *every {
                return Err((
                    oi.key("name"),
                    format!("objective `{}` is already given for every model", o.name),
                ));
            }
            *every = true;
        }
        for (m, model) in o.models.iter().enumerate() {
            if model.is_empty() {
                return Err((oi.key("models").index(m), "must not be empty".to_owned()));
            }
            if !models.insert(model.as_str()) {
                return Err((
                    oi.key("models").index(m),
                    format!("objective `{}` is already given for `{model}`", o.name),
                ));
            }
        }
    }
    Ok(())
}
