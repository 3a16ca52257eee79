//! Test helpers for a real Kubernetes API server (etcd + kube-apiserver started by
//! `e2e/cluster/up.sh`, as controller-runtime's envtest does) and for the Helm chart.
//!
//! A test asks for a [`TestNamespace`]: a fresh namespace on the shared test API server with an
//! admin [`kube::Client`]. When the test fails (panics, or drops the namespace without calling
//! [`TestNamespace::finish`]) the namespace's objects are dumped to stderr; either way they
//! are deleted.
//!
//! The cluster comes from `WARMPATH_KUBECONFIG` when set (CI runs `e2e/cluster/up.sh` first);
//! otherwise the first test of a test binary runs `up.sh` itself, which builds the binaries on
//! first use and stops the cluster after the last test binary using it has exited. Tests are
//! skipped, loudly, only when the binaries cannot be built at all (no Go, no module proxy);
//! `WARMPATH_E2E_REQUIRED=1` turns that skip into a failure.
#![forbid(unsafe_code)]

mod bins;
mod blackhole;
mod chart;
mod cluster;
mod error;
mod namespace;
mod node;
mod pods;
mod resources;

pub use bins::{
    controller_command, workspace_bin, workspace_bin_release, KillOnDrop, SERVING_BINARIES,
};
pub use blackhole::BlackholeProxy;
pub use chart::{list_yaml_files, str_at, Chart, RenderedChart};
pub use cluster::{client_from_kubeconfig, repo_root, run, TestCluster};
pub use error::E2eError;
pub use namespace::TestNamespace;
pub use node::{report_phase, NodeCluster};
pub use pods::{create_pod, set_pod_status};
pub use resources::{
    warmpath_api, warmpath_object, warmpath_resource, warmpath_resource_at, WARMPATH_KINDS,
};

/// Label that tests put on the cluster-scoped objects they create (ClusterRoles, bindings)
/// so that the namespace's cleanup deletes them too; its value is the test namespace's name.
pub const OWNER_LABEL: &str = "e2e.warmpath.dev/namespace";

/// The boundaries of a router under test: the defaults, except that replicas may be on
/// loopback (where the simulated engines listen) and priorities are not capped (tests of the
/// cap set their own).
pub fn test_boundaries() -> ::warmpath_api::boundaries::Boundaries {
    ::warmpath_api::boundaries::Boundaries {
        replica_networks: ::warmpath_api::boundaries::ReplicaNetworks {
            allow: LOOPBACK_NETWORKS
                .split(',')
                .map(|n| n.parse().expect("a network"))
                .collect(),
            hostnames: false,
        },
        max_tenant_priority: 1000,
        ..Default::default()
    }
}

/// The networks of [`test_boundaries`], as `WARMPATH_REPLICA_NETWORKS` says them.
pub const LOOPBACK_NETWORKS: &str = "127.0.0.0/8,::1/128";

/// The API group of warmpath's resources.
pub const GROUP: &str = "warmpath.dev";
