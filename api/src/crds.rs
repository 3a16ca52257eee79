//! Rendering the CRDs as the YAML files in the repository's `crds/` folder (one file per CRD,
//! named `<plural>.<group>.yaml`, holding every served version), and finding files there that
//! no longer match the types.

use crate::{v1, v1alpha1};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::core::crd::{merge_crds, MergeError};
use kube::CustomResourceExt;
use std::path::Path;

/// The command that rewrites `crds/`, named in every drift message.
pub const REGENERATE: &str = "cargo run -p warmpath-api --bin warmpath-crdgen";

const HEADER: &str = "# Generated from api/ by warmpath-crdgen; do not edit.\n\
# Regenerate: cargo run -p warmpath-api --bin warmpath-crdgen (then deploy/helm/sync-crds.sh)\n";

/// Errors of CRD rendering.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("merging the versions of CRD {kind}: {source}")]
    Merge {
        kind: &'static str,
        #[source]
        source: MergeError,
    },
    #[error("rendering CRD {name} as JSON: {source}")]
    Json {
        name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("rendering CRD {name} as YAML: {source}")]
    Yaml {
        name: String,
        #[source]
        source: serde_yaml::Error,
    },
}

/// One generated file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdFile {
    /// File name, `<plural>.<group>.yaml`.
    pub name: String,
    pub yaml: String,
}

/// Every CRD warmpath installs, each serving `v1alpha1` and `v1` and storing `v1`.
///
/// Conversion is `None`, written out although it is the API server's default: the API server
/// then converts by rewriting `apiVersion` alone, so no webhook (TLS serving, the controller
/// up) stands between a client and its objects. It is correct only because `v1` kept every
/// field of `v1alpha1` as it was.
pub fn all() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let merge = |kind: &'static str, versions: Vec<CustomResourceDefinition>| {
        let mut crd =
            merge_crds(versions, v1::VERSION).map_err(|source| CrdError::Merge { kind, source })?;
        crd.spec.conversion = Some(CustomResourceConversion {
            strategy: "None".to_owned(),
            webhook: None,
        });
        Ok(crd)
    };
    Ok(vec![
        merge(
            "InferencePool",
            vec![v1alpha1::InferencePool::crd(), v1::InferencePool::crd()],
        )?,
        merge(
            "InferenceReplica",
            vec![
                v1alpha1::InferenceReplica::crd(),
                v1::InferenceReplica::crd(),
            ],
        )?,
        merge(
            "TenantPolicy",
            vec![v1alpha1::TenantPolicy::crd(), v1::TenantPolicy::crd()],
        )?,
    ])
}

/// The files `crds/` must hold.
pub fn files() -> Result<Vec<CrdFile>, CrdError> {
    all()?.iter().map(render).collect()
}

/// One CRD as a YAML file.
pub fn render(crd: &CustomResourceDefinition) -> Result<CrdFile, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut value = serde_json::to_value(crd).map_err(|source| CrdError::Json {
        name: name.clone(),
        source,
    })?;
    portable_numbers(&mut value);
    let body = serde_yaml::to_string(&value).map_err(|source| CrdError::Yaml {
        name: name.clone(),
        source,
    })?;
    Ok(CrdFile {
        name: format!("{name}.yaml"),
        yaml: format!("{HEADER}{body}"),
    })
}

/// schemars writes `minimum`/`maximum` as floating point (`65535.0`) even on integer fields;
/// written as integers they read as what they are and survive Helm's YAML round trip unchanged.
/// It also writes `format: uint32` for `u32`, which the API server does not know (it warns on
/// every apply): every `u32` fits the `int64` it knows, and the bounds say the rest.
fn portable_numbers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "format" && v == "uint32" {
                    *v = serde_json::Value::from("int64");
                } else if key == "minimum" || key == "maximum" {
                    if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15) {
                        *v = serde_json::Value::from(f as i64);
                    }
                } else {
                    portable_numbers(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(portable_numbers),
        _ => {}
    }
}

/// What differs between `dir` and `files`: missing, changed and extra YAML files, each as a
/// message that says how to fix it. Empty when `dir` is current.
pub fn stale_files(dir: &Path, files: &[CrdFile]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let path = dir.join(&file.name);
        match std::fs::read_to_string(&path) {
            Ok(text) if text == file.yaml => {}
            Ok(_) => problems.push(format!(
                "{} differs from the CRD generated from api/: run `{REGENERATE}`",
                path.display()
            )),
            Err(e) => problems.push(format!(
                "{} cannot be read ({e}): run `{REGENERATE}`",
                path.display()
            )),
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut extra: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
            .filter(|n| !files.iter().any(|f| &f.name == n))
            .collect();
        extra.sort();
        for name in extra {
            problems.push(format!(
                "{} is not generated from api/ (a removed or renamed CRD?): delete it",
                dir.join(name).display()
            ));
        }
    }
    problems
}
