//! `helm install` of the chart into the real test API server: what it creates, and what the
//! router's and the controller's ServiceAccount tokens may and may not do (least privilege),
//! checked with real requests authorized by the API server's RBAC authorizer.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, ObjectReference, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::Client;
use serde_json::json;
use warmpath_e2e::{run, warmpath_api, warmpath_object, warmpath_resource, Chart, TestNamespace};

const RELEASE: &str = "wp";
const ROUTER: &str = "wp-warmpath-router";
const CONTROLLER: &str = "wp-warmpath-controller";

fn pools(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "InferencePool")
}

fn replicas(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "InferenceReplica")
}

fn tenants(c: &Client, ns: &str) -> Api<DynamicObject> {
    warmpath_api(c, ns, "TenantPolicy")
}

/// The HTTP status of a request: 200 for success, the API's code otherwise.
fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("not an API answer: {other}"),
    }
}

fn allowed<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    match r {
        Ok(_) => {}
        Err(e) => panic!("{what}: expected to be allowed, got {e}"),
    }
}

fn forbidden<T: std::fmt::Debug>(what: &str, r: Result<T, kube::Error>) {
    assert_eq!(code(r), 403, "{what}: expected 403 Forbidden");
}

/// Installs the CRDs the chart would install (the repository's generated ones) once for
/// the cluster, outside any release, so that concurrent tests do not fight over their owner.
fn install_crds(ns: &TestNamespace, chart: &Chart) {
    ns.cluster()
        .apply_crds(&chart.dir().join("files/crds"))
        .expect("apply CRDs");
}

/// `kubectl auth can-i VERB secrets --as` ServiceAccount `account` of namespace `ns`, in
/// namespace `within` (`None`: in every namespace at once): the API server's RBAC answer, as an
/// operator would ask it.
fn can_read_secrets(ns: &TestNamespace, account: &str, verb: &str, within: Option<&str>) -> bool {
    let mut cmd = ns.cluster().kubectl();
    cmd.args(["auth", "can-i", verb, "secrets", "--as"])
        .arg(format!("system:serviceaccount:{}:{account}", ns.name()));
    match within {
        Some(w) => cmd.args(["-n", w]),
        None => cmd.arg("--all-namespaces"),
    };
    let out = cmd.output().expect("kubectl auth can-i");
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => true,
        "no" => false,
        _ => panic!(
            "kubectl auth can-i: {answer:?} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Secrets readable by `account` in the release namespace only (`here`), in no other
/// namespace and not cluster-wide, for every verb that reads.
fn reads_secrets_only_here(ns: &TestNamespace, account: &str, here: bool) {
    for verb in ["get", "list", "watch"] {
        assert_eq!(
            can_read_secrets(ns, account, verb, Some(ns.name())),
            here,
            "{account} {verb} secrets in its namespace"
        );
        for elsewhere in [Some("default"), Some("kube-system"), None] {
            assert!(
                !can_read_secrets(ns, account, verb, elsewhere),
                "{account} may {verb} secrets in {elsewhere:?}"
            );
        }
    }
}

fn helm_install(ns: &TestNamespace, chart: &Chart, extra: &[&str]) -> String {
    ns.helm_install(chart, RELEASE, extra)
        .expect("helm install")
}

#[tokio::test]
async fn helm_install_creates_what_it_should() {
    let Some(ns) = TestNamespace::create("helm-install").await else {
        return;
    };
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    install_crds(&ns, &chart);
    let notes = helm_install(&ns, &chart, &[]);
    assert!(notes.contains("STATUS: deployed"), "{notes}");
    assert!(
        notes.contains(&format!("{ROUTER}.{}.svc:8080", ns.name())),
        "NOTES name the router Service: {notes}"
    );

    let c = ns.client();
    let n = ns.name();
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), n);
    let router = deployments.get(ROUTER).await.expect("router Deployment");
    assert_eq!(router.spec.replicas, Some(2));
    let pod = router.spec.template.spec.expect("pod spec");
    assert_eq!(pod.service_account_name.as_deref(), Some(ROUTER));
    let sc = pod.containers[0]
        .security_context
        .clone()
        .expect("container securityContext");
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.run_as_non_root, Some(true));
    assert!(
        pod.affinity.and_then(|a| a.pod_anti_affinity).is_some(),
        "router anti-affinity"
    );
    let controller = deployments
        .get(CONTROLLER)
        .await
        .expect("controller Deployment");
    assert_eq!(controller.spec.replicas, Some(2));

    for name in [ROUTER, CONTROLLER] {
        allowed(
            name,
            Api::<Service>::namespaced(c.clone(), n).get(name).await,
        );
        allowed(
            name,
            Api::<ServiceAccount>::namespaced(c.clone(), n)
                .get(name)
                .await,
        );
        allowed(
            name,
            Api::<PodDisruptionBudget>::namespaced(c.clone(), n)
                .get(name)
                .await,
        );
        allowed(
            name,
            Api::<ClusterRole>::all(c.clone())
                .get(&format!("{n}-{name}"))
                .await,
        );
        allowed(
            name,
            Api::<ClusterRoleBinding>::all(c.clone())
                .get(&format!("{n}-{name}"))
                .await,
        );
    }
    allowed(
        "lease role",
        Api::<Role>::namespaced(c.clone(), n)
            .get(&format!("{CONTROLLER}-leader-election"))
            .await,
    );
    allowed(
        "lease binding",
        Api::<RoleBinding>::namespaced(c.clone(), n)
            .get(&format!("{CONTROLLER}-leader-election"))
            .await,
    );
    allowed(
        "secrets role",
        Api::<Role>::namespaced(c.clone(), n)
            .get(&format!("{n}-{CONTROLLER}-secrets"))
            .await,
    );
    let config = Api::<ConfigMap>::namespaced(c.clone(), n)
        .get(ROUTER)
        .await
        .expect("router ConfigMap");
    let file: serde_yaml::Value =
        serde_yaml::from_str(&config.data.unwrap()["router.yaml"]).expect("router.yaml is YAML");
    assert_eq!(file["listen"].as_str(), Some("0.0.0.0:8080"));
    assert_eq!(file["admin"].as_str(), Some("0.0.0.0:9090"));

    // Uninstalling removes the cluster-scoped RBAC too.
    run(
        ns.cluster()
            .helm()
            .args(["uninstall", RELEASE, "-n", n, "--wait", "--timeout", "60s"]),
        None,
    )
    .expect("helm uninstall");
    assert_eq!(
        code(
            Api::<ClusterRole>::all(c.clone())
                .get(&format!("{n}-{ROUTER}"))
                .await
        ),
        404
    );
    assert_eq!(code(deployments.get(ROUTER).await), 404);
    ns.finish();
}

#[tokio::test]
async fn service_account_tokens_get_least_privilege() {
    let Some(ns) = TestNamespace::create("helm-rbac").await else {
        return;
    };
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    install_crds(&ns, &chart);
    helm_install(&ns, &chart, &[]);
    let admin = ns.client();
    let n = ns.name();

    // Objects to read and write, created as admin.
    pools(&admin, n)
        .create(
            &PostParams::default(),
            &warmpath_object("InferencePool", "llama", json!({"models": ["llama"]})),
        )
        .await
        .expect("pool");
    tenants(&admin, n)
        .create(
            &PostParams::default(),
            &warmpath_object("TenantPolicy", "acme", json!({"weight": 2})),
        )
        .await
        .expect("tenant");
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("acme-key".into()),
            ..Default::default()
        },
        string_data: Some([("key".to_owned(), "sk-test".to_owned())].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(admin.clone(), n)
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "vllm-0", "labels": {"app": "vllm"}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(admin.clone(), n)
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");

    // --- router: reads warmpath resources and the Secrets holding API keys, nothing else -----
    let (router, _) = ns
        .client_as_service_account(n, ROUTER)
        .await
        .expect("router token");
    let lp = ListParams::default();
    allowed("router lists pools", pools(&router, n).list(&lp).await);
    allowed("router gets a pool", pools(&router, n).get("llama").await);
    allowed(
        "router gets pool status",
        pools(&router, n).get_status("llama").await,
    );
    allowed(
        "router lists replicas",
        replicas(&router, n).list(&lp).await,
    );
    allowed(
        "router lists tenant policies",
        tenants(&router, n).list(&lp).await,
    );
    allowed(
        "router lists pools cluster-wide",
        Api::<DynamicObject>::all_with(router.clone(), &warmpath_resource("InferencePool"))
            .list(&lp)
            .await,
    );
    // TenantPolicies' API keys, wherever it watches TenantPolicies (here: everywhere).
    allowed(
        "router reads API-key secrets",
        Api::<Secret>::namespaced(router.clone(), n)
            .get("acme-key")
            .await,
    );
    allowed(
        "router lists secrets",
        Api::<Secret>::namespaced(router.clone(), n).list(&lp).await,
    );
    // Only there: every namespace is watched, but no Secret outside the release namespace
    // (rbac.secretNamespaces' default) is readable, by any account the chart creates.
    reads_secrets_only_here(&ns, ROUTER, true);
    reads_secrets_only_here(&ns, CONTROLLER, true);
    forbidden(
        "router writes secrets",
        Api::<Secret>::namespaced(router.clone(), n)
            .delete("acme-key", &DeleteParams::default())
            .await,
    );
    forbidden(
        "router lists pods",
        Api::<Pod>::namespaced(router.clone(), n).list(&lp).await,
    );
    forbidden(
        "router reads a pod",
        Api::<Pod>::namespaced(router.clone(), n)
            .get("vllm-0")
            .await,
    );
    forbidden(
        "router lists configmaps",
        Api::<ConfigMap>::namespaced(router.clone(), n)
            .list(&lp)
            .await,
    );
    forbidden(
        "router creates replicas",
        replicas(&router, n)
            .create(
                &PostParams::default(),
                &warmpath_object("InferenceReplica", "r", json!({})),
            )
            .await,
    );
    forbidden(
        "router deletes pools",
        pools(&router, n)
            .delete("llama", &DeleteParams::default())
            .await,
    );
    forbidden(
        "router writes pool status",
        pools(&router, n)
            .patch_status(
                "llama",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"ready": 1}})),
            )
            .await,
    );
    forbidden(
        "router takes leases",
        Api::<Lease>::namespaced(router.clone(), n).list(&lp).await,
    );

    // --- controller: single writer of replicas and status; pods read-only; own lease --------
    let (ctl, _) = ns
        .client_as_service_account(n, CONTROLLER)
        .await
        .expect("controller token");
    allowed("controller lists pools", pools(&ctl, n).list(&lp).await);
    allowed(
        "controller lists pods",
        Api::<Pod>::namespaced(ctl.clone(), n).list(&lp).await,
    );
    allowed(
        "controller lists pods cluster-wide",
        Api::<Pod>::all(ctl.clone()).list(&lp).await,
    );
    allowed(
        "controller creates a replica",
        replicas(&ctl, n)
            .create(
                &PostParams::default(),
                &warmpath_object(
                    "InferenceReplica",
                    "llama-vllm-0",
                    json!({"pool": "llama", "address": "10.0.0.1", "port": 8000}),
                ),
            )
            .await,
    );
    allowed(
        "controller patches a replica",
        replicas(&ctl, n)
            .patch(
                "llama-vllm-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"address": "10.0.0.2"}})),
            )
            .await,
    );
    allowed(
        "controller writes replica status",
        replicas(&ctl, n)
            .patch_status(
                "llama-vllm-0",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"observedGeneration": 1}})),
            )
            .await,
    );
    allowed(
        "controller writes pool status",
        pools(&ctl, n)
            .patch_status(
                "llama",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"readyReplicas": 1}})),
            )
            .await,
    );
    allowed(
        "controller writes tenant status",
        tenants(&ctl, n)
            .patch_status(
                "acme",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"apiKeys": 1}})),
            )
            .await,
    );
    allowed(
        "controller deletes a replica",
        replicas(&ctl, n)
            .delete("llama-vllm-0", &DeleteParams::default())
            .await,
    );
    allowed(
        "controller reads API-key secrets in its namespace",
        Api::<Secret>::namespaced(ctl.clone(), n)
            .get("acme-key")
            .await,
    );
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some("llama-".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            kind: Some("InferencePool".into()),
            name: Some("llama".into()),
            namespace: Some(n.into()),
            ..Default::default()
        },
        reason: Some("ReplicaAdded".into()),
        message: Some("e2e".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    allowed(
        "controller records events",
        Api::<Event>::namespaced(ctl.clone(), n)
            .create(&PostParams::default(), &event)
            .await,
    );

    // Pools: written only to mirror GIE InferencePools (dry runs: RBAC is checked all the same).
    allowed(
        "controller deletes pools",
        pools(&ctl, n)
            .delete("llama", &DeleteParams::default().dry_run())
            .await,
    );
    allowed(
        "controller creates pools",
        pools(&ctl, n)
            .create(
                &PostParams {
                    dry_run: true,
                    ..Default::default()
                },
                &warmpath_object(
                    "InferencePool",
                    "x",
                    json!({"models": ["m"], "selector": {"app": "x"}, "targetPort": 8000}),
                ),
            )
            .await,
    );
    allowed(
        "controller lists GIE pools",
        Api::<::warmpath_api::gie::InferencePool>::namespaced(ctl.clone(), n)
            .list(&lp)
            .await
            .map(|_| ())
            .or_else(|e| match e {
                // GIE's CRD is not installed by this test: 404 means RBAC let it through.
                kube::Error::Api(s) if s.code == 404 => Ok(()),
                e => Err(e),
            }),
    );
    forbidden(
        "controller edits tenant policies",
        tenants(&ctl, n)
            .patch(
                "acme",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"weight": 9}})),
            )
            .await,
    );
    forbidden(
        "controller deletes pods",
        Api::<Pod>::namespaced(ctl.clone(), n)
            .delete("vllm-0", &DeleteParams::default())
            .await,
    );
    forbidden(
        "controller creates pods",
        Api::<Pod>::namespaced(ctl.clone(), n)
            .create(&PostParams::default(), &pod)
            .await,
    );
    forbidden(
        "controller reads secrets in kube-system",
        Api::<Secret>::namespaced(ctl.clone(), "kube-system")
            .list(&lp)
            .await,
    );
    forbidden(
        "controller lists secrets cluster-wide",
        Api::<Secret>::all(ctl.clone()).list(&lp).await,
    );
    forbidden(
        "controller lists configmaps",
        Api::<ConfigMap>::namespaced(ctl.clone(), n).list(&lp).await,
    );
    forbidden(
        "controller edits deployments",
        Api::<Deployment>::namespaced(ctl.clone(), n)
            .delete(ROUTER, &DeleteParams::default())
            .await,
    );

    // Leader election: its own Lease in the release namespace, and no other.
    let leases: Api<Lease> = Api::namespaced(ctl.clone(), n);
    let lease = |name: &str| Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(
            serde_json::from_value(
                json!({"holderIdentity": "controller-0", "leaseDurationSeconds": 15}),
            )
            .unwrap(),
        ),
    };
    allowed(
        "controller creates its lease",
        leases
            .create(&PostParams::default(), &lease(CONTROLLER))
            .await,
    );
    allowed("controller reads its lease", leases.get(CONTROLLER).await);
    allowed(
        "controller renews its lease",
        leases
            .patch(
                CONTROLLER,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"holderIdentity": "controller-1"}})),
            )
            .await,
    );
    let mut current = leases.get(CONTROLLER).await.expect("lease");
    current.spec.as_mut().unwrap().holder_identity = Some("controller-0".into());
    allowed(
        "controller replaces its lease",
        leases
            .replace(CONTROLLER, &PostParams::default(), &current)
            .await,
    );
    // Another lease: create cannot be limited by name, but the controller cannot read or
    // update it, so it cannot run a leader election on anybody else's lease.
    Api::<Lease>::namespaced(admin.clone(), n)
        .create(&PostParams::default(), &lease("someone-else"))
        .await
        .expect("admin lease");
    forbidden(
        "controller reads another lease",
        leases.get("someone-else").await,
    );
    forbidden(
        "controller updates another lease",
        leases
            .patch(
                "someone-else",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"holderIdentity": "x"}})),
            )
            .await,
    );
    forbidden(
        "controller takes leases in another namespace",
        Api::<Lease>::namespaced(ctl.clone(), "default")
            .get(CONTROLLER)
            .await,
    );
    ns.finish();
}

#[tokio::test]
async fn namespaced_rbac_grants_nothing_cluster_wide() {
    let Some(ns) = TestNamespace::create("helm-rbac-namespaced").await else {
        return;
    };
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    install_crds(&ns, &chart);
    let n = ns.name().to_owned();
    helm_install(
        &ns,
        &chart,
        &["--set", &format!("rbac.watchNamespaces[0]={n}")],
    );
    let (router, _) = ns
        .client_as_service_account(&n, ROUTER)
        .await
        .expect("router token");
    let lp = ListParams::default();
    allowed(
        "router lists pools in a watched namespace",
        pools(&router, &n).list(&lp).await,
    );
    forbidden(
        "router lists pools cluster-wide",
        Api::<DynamicObject>::all_with(router.clone(), &warmpath_resource("InferencePool"))
            .list(&lp)
            .await,
    );
    forbidden(
        "router lists pools elsewhere",
        pools(&router, "default").list(&lp).await,
    );
    allowed(
        "router lists secrets in a watched namespace",
        Api::<Secret>::namespaced(router.clone(), &n)
            .list(&lp)
            .await,
    );
    forbidden(
        "router lists secrets cluster-wide",
        Api::<Secret>::all(router.clone()).list(&lp).await,
    );
    forbidden(
        "router lists secrets elsewhere",
        Api::<Secret>::namespaced(router.clone(), "default")
            .list(&lp)
            .await,
    );
    let (ctl, _) = ns
        .client_as_service_account(&n, CONTROLLER)
        .await
        .expect("controller token");
    allowed(
        "controller lists pods in a watched namespace",
        Api::<Pod>::namespaced(ctl.clone(), &n).list(&lp).await,
    );
    forbidden(
        "controller lists pods cluster-wide",
        Api::<Pod>::all(ctl.clone()).list(&lp).await,
    );
    forbidden(
        "controller lists pods elsewhere",
        Api::<Pod>::namespaced(ctl.clone(), "default")
            .list(&lp)
            .await,
    );
    ns.finish();
}

#[tokio::test]
async fn sidecar_mode_binds_the_serving_pods_service_accounts() {
    let Some(ns) = TestNamespace::create("helm-sidecar").await else {
        return;
    };
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    install_crds(&ns, &chart);
    let n = ns.name().to_owned();
    let admin = ns.client();
    let vllm = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("vllm".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin.clone(), &n)
        .create(&PostParams::default(), &vllm)
        .await
        .expect("serving pods' ServiceAccount");
    let notes = helm_install(
        &ns,
        &chart,
        &[
            "--set",
            "router.mode=sidecar",
            "--set",
            &format!("router.sidecar.serviceAccounts[0].namespace={n}"),
            "--set",
            "router.sidecar.serviceAccounts[0].name=vllm",
        ],
    );
    assert!(
        notes.contains("sidecar"),
        "NOTES explain the sidecar mode: {notes}"
    );
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &n);
    assert_eq!(
        code(deployments.get(ROUTER).await),
        404,
        "no router Deployment in sidecar mode"
    );
    let snippet = Api::<ConfigMap>::namespaced(admin.clone(), &n)
        .get(&format!("{ROUTER}-sidecar"))
        .await
        .expect("sidecar snippet ConfigMap");
    assert!(snippet.data.unwrap()["containers.yaml"].contains("--config"));

    let (sidecar, _) = ns
        .client_as_service_account(&n, "vllm")
        .await
        .expect("vllm token");
    let lp = ListParams::default();
    allowed("sidecar lists pools", pools(&sidecar, &n).list(&lp).await);
    allowed(
        "sidecar lists tenant policies",
        tenants(&sidecar, &n).list(&lp).await,
    );
    // The router in the serving pod reads TenantPolicies' API keys like the Deployment's.
    allowed(
        "sidecar reads secrets",
        Api::<Secret>::namespaced(sidecar.clone(), &n)
            .list(&lp)
            .await,
    );
    reads_secrets_only_here(&ns, "vllm", true);
    forbidden(
        "sidecar writes replicas",
        replicas(&sidecar, &n)
            .create(
                &PostParams::default(),
                &warmpath_object("InferenceReplica", "r", json!({})),
            )
            .await,
    );
    ns.finish();
}
