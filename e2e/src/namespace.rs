//! A fresh namespace per test on the shared test API server: created with a random suffix,
//! dumped to stderr when the test fails, and always deleted.
//!
//! No kube-controller-manager runs, so the helper does by hand what its controllers would:
//! it creates the namespace's `default` ServiceAccount (pods need it to pass admission), and on
//! cleanup deletes the namespace's objects and finalizes the namespace itself (otherwise it
//! would stay `Terminating` forever).

use crate::cluster::{client_from_kubeconfig, describe, run, TestCluster};
use crate::error::E2eError;
use crate::OWNER_LABEL;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use rand::Rng;
use std::path::{Path, PathBuf};

/// A namespace of one test; see the module documentation.
pub struct TestNamespace {
    cluster: &'static TestCluster,
    name: String,
    client: kube::Client,
    scratch: PathBuf,
    finished: bool,
}

impl TestNamespace {
    /// A fresh namespace `wp-<test>-<random>` on the test cluster (started if needed), or
    /// `None` after a loud SKIP message when the cluster cannot be built here.
    ///
    /// Panics when the cluster builds but cannot be reached: that is a failure to see.
    pub async fn create(test: &str) -> Option<TestNamespace> {
        let cluster = TestCluster::get_or_skip(test)?;
        match Self::create_on(cluster, test).await {
            Ok(ns) => Some(ns),
            Err(e) => panic!("{test}: creating the test namespace: {e}"),
        }
    }

    /// A fresh namespace on `cluster`.
    pub async fn create_on(
        cluster: &'static TestCluster,
        test: &str,
    ) -> Result<TestNamespace, E2eError> {
        let client = cluster.client().await?;
        let name = namespace_name(test, rand::rng().random::<u32>());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([("e2e.warmpath.dev/test".to_owned(), label_value(test))].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces.create(&PostParams::default(), &ns).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let default_sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // A cluster with a controller-manager (the node cluster) creates it too: whoever is
        // first wins, and the namespace has its default account either way.
        match accounts.create(&PostParams::default(), &default_sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let scratch = std::env::temp_dir().join(format!("warmpath-e2e-{name}"));
        std::fs::create_dir_all(&scratch).map_err(|e| E2eError::io(&scratch, e))?;
        Ok(TestNamespace {
            cluster,
            name,
            client,
            scratch,
            finished: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// An admin client (any namespace; use [`TestNamespace::name`]).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn cluster(&self) -> &'static TestCluster {
        self.cluster
    }

    /// A folder for this test's files, removed at cleanup.
    pub fn scratch_dir(&self) -> &Path {
        &self.scratch
    }

    /// The label cluster-scoped objects of this test carry so that cleanup deletes them.
    pub fn owner_label(&self) -> (&'static str, &str) {
        (OWNER_LABEL, &self.name)
    }

    /// A ServiceAccount's token from the TokenRequest API (valid 10 minutes).
    pub fn service_account_token(
        &self,
        namespace: &str,
        account: &str,
    ) -> Result<String, E2eError> {
        let out = run(
            self.cluster.kubectl().args([
                "create",
                "token",
                account,
                "-n",
                namespace,
                "--duration",
                "10m",
            ]),
            None,
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// A client that authenticates as ServiceAccount `namespace/account`, with the kubeconfig
    /// it uses (for kubectl).
    pub async fn client_as_service_account(
        &self,
        namespace: &str,
        account: &str,
    ) -> Result<(kube::Client, PathBuf), E2eError> {
        let token = self.service_account_token(namespace, account)?;
        let path = self.cluster.kubeconfig_for_token(
            &self.scratch,
            &format!("{namespace}-{account}"),
            &token,
        )?;
        Ok((client_from_kubeconfig(&path).await?, path))
    }

    /// `helm install <release>` of `chart` into this namespace, with the CRDs left to the
    /// caller (`crds.install=false`: concurrent tests must not fight over owning them) and the
    /// owner label on cluster-scoped objects, so cleanup removes them even when the test fails
    /// before uninstalling. Returns helm's output (the NOTES).
    pub fn helm_install(
        &self,
        chart: &crate::Chart,
        release: &str,
        extra: &[&str],
    ) -> Result<String, E2eError> {
        let label = format!(
            "commonLabels.{}={}",
            OWNER_LABEL.replace('.', "\\."),
            self.name
        );
        let out = run(
            self.cluster
                .helm()
                .args(["install", release])
                .arg(chart.dir())
                .args([
                    "-n",
                    &self.name,
                    "--set",
                    "crds.install=false",
                    "--set",
                    &label,
                ])
                .args(["--timeout", "60s"])
                .args(extra),
            None,
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Marks the test passed and cleans up. A namespace dropped without this (a panic, an early
    /// `?` return) has its objects dumped to stderr first.
    pub fn finish(mut self) {
        self.finished = true;
        // Drop cleans up.
    }

    /// The namespace's objects, every listable namespaced kind, as YAML (for failure reports).
    pub fn dump(&self) -> String {
        let kinds = match self.namespaced_kinds(&["list"]) {
            Ok(kinds) => kinds,
            Err(e) => return format!("(cannot list resource kinds: {e})"),
        };
        let mut cmd = self.cluster.kubectl();
        cmd.args([
            "get",
            &kinds.join(","),
            "-n",
            &self.name,
            "-o",
            "yaml",
            "--ignore-not-found",
        ]);
        match run(&mut cmd, None) {
            Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
            Err(e) => format!("({} failed: {e})", describe(&cmd)),
        }
    }

    fn namespaced_kinds(&self, verbs: &[&str]) -> Result<Vec<String>, E2eError> {
        let out = run(
            self.cluster.kubectl().args([
                "api-resources",
                "--namespaced=true",
                &format!("--verbs={}", verbs.join(",")),
                "-o",
                "name",
            ]),
            None,
        )?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect())
    }

    /// Deletes the namespace's objects, the cluster-scoped objects labelled with
    /// [`crate::OWNER_LABEL`], and the namespace (finalized by hand: no namespace controller).
    fn cleanup(&self) -> Result<(), E2eError> {
        let kinds = self.namespaced_kinds(&["list", "deletecollection"])?;
        let kinds: Vec<String> = kinds
            .into_iter()
            .filter(|k| !k.starts_with("events"))
            .collect();
        if !kinds.is_empty() {
            run(
                self.cluster.kubectl().args([
                    "delete",
                    &kinds.join(","),
                    "--all",
                    "-n",
                    &self.name,
                    "--grace-period=0",
                    "--force",
                    "--wait=false",
                    "--ignore-not-found",
                ]),
                None,
            )?;
        }
        let selector = format!("{OWNER_LABEL}={}", self.name);
        run(
            self.cluster.kubectl().args([
                "delete",
                "clusterroles,clusterrolebindings",
                "-l",
                &selector,
                "--wait=false",
                "--ignore-not-found",
            ]),
            None,
        )?;
        run(
            self.cluster.kubectl().args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ]),
            None,
        )?;
        let out = run(
            self.cluster.kubectl().args([
                "get",
                "namespace",
                &self.name,
                "-o",
                "json",
                "--ignore-not-found",
            ]),
            None,
        )?;
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let mut ns: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        ns["spec"]["finalizers"] = serde_json::json!([]);
        let body = serde_json::to_vec(&ns)?;
        run(
            self.cluster.kubectl().args([
                "replace",
                "--raw",
                &format!("/api/v1/namespaces/{}/finalize", self.name),
                "-f",
                "-",
            ]),
            Some(&body),
        )?;
        Ok(())
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::thread::panicking() || !self.finished {
            eprintln!(
                "===== warmpath-e2e: test failed; objects in namespace {} =====\n{}\n===== end of namespace {} =====",
                self.name,
                self.dump(),
                self.name
            );
        }
        // kubectl rather than the async client: Drop cannot await.
        if let Err(e) = self.cleanup() {
            eprintln!("warmpath-e2e: cleaning up namespace {}: {e}", self.name);
        }
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

/// `wp-<test>-<suffix>`, a valid DNS label of at most 63 characters.
fn namespace_name(test: &str, suffix: u32) -> String {
    let mut base: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(40);
    let base = base.trim_matches('-');
    format!("wp-{base}-{suffix:08x}")
}

fn label_value(test: &str) -> String {
    let mut v: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    v.truncate(63);
    v.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_dns_labels() {
        let name = namespace_name("helm_install::Creates_What_It_Should!", 0xdead_beef);
        assert_eq!(name, "wp-helm-install--creates-what-it-should-deadbeef");
        let long = namespace_name(&"x".repeat(200), 1);
        assert!(long.len() <= 63, "{long}");
        assert!(long
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("a::b c"), "a--b-c");
        assert_eq!(label_value("__x__"), "x");
        assert!(label_value(&"y".repeat(100)).len() <= 63);
    }
}
