//! The Helm chart under test (deploy/helm/warmpath): a working copy with CRDs in it, rendered
//! with `helm template` and read back as YAML documents.
//! The chart's CRDs (files/crds/) are the repository's generated ones (crds/, from api/), kept
//! in sync by deploy/helm/sync-crds.sh; a test fails when they differ.

use crate::cluster::{repo_root, run, TestCluster};
use crate::error::E2eError;
use std::path::{Path, PathBuf};

/// A copy of the chart ready to render or install.
#[derive(Debug, Clone)]
pub struct Chart {
    dir: PathBuf,
}

impl Chart {
    /// The chart in the repository.
    pub fn source_dir() -> PathBuf {
        repo_root().join("deploy/helm/warmpath")
    }

    /// Copies the chart into `scratch/warmpath`.
    pub fn prepare(scratch: &Path) -> Result<Chart, E2eError> {
        let dir = scratch.join("warmpath");
        copy_dir(&Self::source_dir(), &dir)?;
        Ok(Chart { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `helm template <release> <chart> -n <namespace> <args…>`.
    pub fn template(
        &self,
        cluster: &TestCluster,
        release: &str,
        namespace: &str,
        args: &[&str],
    ) -> Result<RenderedChart, E2eError> {
        let mut cmd = cluster.helm();
        cmd.arg("template")
            .arg(release)
            .arg(&self.dir)
            .args(["--namespace", namespace])
            .args(args);
        let out = run(&mut cmd, None)?;
        RenderedChart::parse(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The output of `helm template`: the text and its documents.
#[derive(Debug, Clone)]
pub struct RenderedChart {
    pub text: String,
    pub objects: Vec<serde_yaml::Value>,
}

impl RenderedChart {
    pub fn parse(text: String) -> Result<RenderedChart, E2eError> {
        let mut objects = Vec::new();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: serde_yaml::Value = serde::Deserialize::deserialize(doc)?;
            if !value.is_null() {
                objects.push(value);
            }
        }
        Ok(RenderedChart { text, objects })
    }

    /// `Kind/name` of every object, sorted.
    pub fn kinds_and_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    str_at(o, &["kind"]),
                    str_at(o, &["metadata", "name"])
                )
            })
            .collect();
        v.sort();
        v
    }

    pub fn of_kind<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a serde_yaml::Value> + 'a {
        self.objects
            .iter()
            .filter(move |o| str_at(o, &["kind"]) == kind)
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<&serde_yaml::Value> {
        self.objects
            .iter()
            .find(|o| str_at(o, &["kind"]) == kind && str_at(o, &["metadata", "name"]) == name)
    }
}

/// The string at a path of mapping keys, or "".
pub fn str_at<'a>(v: &'a serde_yaml::Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for key in path {
        match cur.get(*key) {
            Some(next) => cur = next,
            None => return "",
        }
    }
    cur.as_str().unwrap_or("")
}

fn yaml_files(dir: &Path) -> Result<impl Iterator<Item = PathBuf>, E2eError> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(E2eError::io(dir, e)),
    };
    files.sort();
    Ok(files.into_iter())
}

/// The YAML files of a folder, sorted (none when it does not exist).
pub fn list_yaml_files(dir: &Path) -> Result<Vec<PathBuf>, E2eError> {
    Ok(yaml_files(dir)?.collect())
}

fn copy_dir(src: &Path, dst: &Path) -> Result<(), E2eError> {
    std::fs::create_dir_all(dst).map_err(|e| E2eError::io(dst, e))?;
    for entry in std::fs::read_dir(src).map_err(|e| E2eError::io(src, e))? {
        let entry = entry.map_err(|e| E2eError::io(src, e))?;
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| E2eError::io(&from, e))?;
        if kind.is_dir() {
            copy_dir(&from, &to)?;
        } else {
            std::fs::copy(&from, &to).map_err(|e| E2eError::io(&from, e))?;
        }
    }
    Ok(())
}
