//! The test helper itself: a namespace is fresh, its dump shows its objects, its cleanup
//! removes them (and the cluster-scoped objects labelled as its own), and up.sh is idempotent.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, ObjectMeta, PostParams};
use std::process::{Command, Stdio};
use warmpath_e2e::{repo_root, TestNamespace, OWNER_LABEL};

#[tokio::test]
async fn namespaces_are_fresh_dumped_and_cleaned_up() {
    let Some(ns) = TestNamespace::create("helper-cleanup").await else {
        return;
    };
    let client = ns.client();
    let name = ns.name().to_owned();
    assert!(name.starts_with("wp-helper-cleanup-"), "{name}");
    // Pods need the default ServiceAccount, which no controller creates here.
    Api::<ServiceAccount>::namespaced(client.clone(), &name)
        .get("default")
        .await
        .expect("default SA");

    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("left-behind".into()),
            ..Default::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &name)
        .create(&PostParams::default(), &cm)
        .await
        .expect("configmap");
    let role_name = format!("{name}-owned");
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(role_name.clone()),
            labels: Some([(OWNER_LABEL.to_owned(), name.clone())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles
        .create(&PostParams::default(), &role)
        .await
        .expect("cluster role");

    let dump = ns.dump();
    assert!(
        dump.contains("name: left-behind"),
        "the dump shows the namespace's objects:\n{dump}"
    );

    ns.finish();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // Cleanup finalizes the namespace itself, so it is gone at once, not Terminating.
    assert!(
        namespaces
            .get_opt(&name)
            .await
            .expect("get namespace")
            .is_none(),
        "namespace {name} removed"
    );
    assert!(
        roles.get_opt(&role_name).await.expect("get role").is_none(),
        "owned ClusterRole removed"
    );
    let leftovers = Api::<ConfigMap>::namespaced(client, &name)
        .get_opt("left-behind")
        .await
        .expect("get configmap");
    assert!(
        leftovers.is_none(),
        "objects of the namespace deleted, not orphaned in etcd"
    );
}

#[tokio::test]
async fn up_sh_is_idempotent() {
    let Some(ns) = TestNamespace::create("helper-up").await else {
        return;
    };
    let kubeconfig = ns.cluster().kubeconfig().to_path_buf();
    if !kubeconfig.starts_with(repo_root().join("e2e"))
        && std::env::var_os("WARMPATH_E2E_CACHE").is_none()
    {
        eprintln!(
            "note: WARMPATH_KUBECONFIG is not up.sh's cluster ({}); nothing to check",
            kubeconfig.display()
        );
        ns.finish();
        return;
    }
    // A second up.sh finds the cluster running and prints the same kubeconfig, without
    // restarting anything (the namespace made above is still there).
    let out = Command::new(repo_root().join("e2e/cluster/up.sh"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run up.sh");
    assert!(out.status.success(), "up.sh: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().last().map(str::trim),
        Some(kubeconfig.to_str().unwrap())
    );
    let namespaces: Api<Namespace> = Api::all(ns.client());
    namespaces
        .get(ns.name())
        .await
        .expect("same cluster, same etcd");
    ns.finish();
}
