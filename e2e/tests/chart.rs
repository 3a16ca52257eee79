//! The Helm chart rendered for a matrix of values and applied to the real test API server with
//! server-side dry-run, `helm lint --strict`, the values schema, and the chart's CRD copy.

mod monitoring;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use warmpath_e2e::{
    list_yaml_files, repo_root, run, str_at, Chart, RenderedChart, TestCluster, TestNamespace,
};

const RELEASE: &str = "wp";

/// One row of the values matrix: a name and `helm template` arguments.
struct Case {
    name: &'static str,
    args: Vec<String>,
}

fn matrix(ns: &str) -> Vec<Case> {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    vec![
        Case {
            name: "defaults",
            args: vec![],
        },
        Case {
            name: "ha",
            args: s(&[
                "--set",
                "router.replicas=5",
                "--set",
                "controller.replicas=3",
                "--set",
                "router.podAntiAffinity=hard",
                "--set",
                "router.pdb.minAvailable=3",
                "--set",
                "controller.pdb.minAvailable=2",
            ]),
        },
        Case {
            name: "sidecar",
            args: vec![
                "--set".into(),
                "router.mode=sidecar".into(),
                "--set".into(),
                format!("router.sidecar.serviceAccounts[0].namespace={ns}"),
                "--set".into(),
                "router.sidecar.serviceAccounts[0].name=vllm".into(),
            ],
        },
        Case {
            name: "pd-sidecar",
            args: vec![
                "--set".into(),
                "router.mode=sidecar".into(),
                "--set".into(),
                "router.sidecar.pd.enabled=true".into(),
                "--set".into(),
                "router.sidecar.pd.prefillAllow[0]=10.0.0.0/8".into(),
                "--set".into(),
                "router.sidecar.pd.prefillHosts[0]=prefill-0.llm:8000".into(),
                "-f".into(),
                warmpath_e2e::repo_root()
                    .join("examples/pd/values.yaml")
                    .display()
                    .to_string(),
                // The example watches namespace `llm`; the test's own stands in for it.
                "--set".into(),
                format!("rbac.watchNamespaces[0]={ns}"),
            ],
        },
        Case {
            name: "monitoring-on",
            args: s(&[
                "--set",
                "monitoring.serviceMonitor.enabled=true",
                "--set",
                "monitoring.serviceMonitor.labels.release=prometheus",
                "--set",
                "monitoring.grafanaDashboard.enabled=true",
                "--set",
                "monitoring.prometheusRule.enabled=true",
                "--set",
                "monitoring.prometheusRule.labels.release=prometheus",
                "--set",
                "router.adminAuth.tokenSecret=wp-admin-token",
            ]),
        },
        Case {
            name: "monitoring-off",
            args: s(&[
                "--set",
                "monitoring.serviceMonitor.enabled=false",
                "--set",
                "monitoring.grafanaDashboard.enabled=false",
            ]),
        },
        Case {
            name: "tokenizer-volume",
            args: s(&[
                "--set",
                "router.extraVolumes[0].name=tokenizer",
                "--set",
                "router.extraVolumes[0].configMap.name=tiny-tokenizer",
                "--set",
                "router.extraVolumeMounts[0].name=tokenizer",
                "--set",
                "router.extraVolumeMounts[0].mountPath=/etc/warmpath/tokenizers/tiny",
                "--set",
                "router.extraVolumeMounts[0].readOnly=true",
            ]),
        },
        Case {
            name: "network-policy",
            args: s(&[
                "--set-json",
                r#"router.networkPolicy.adminFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]"#,
                "--set",
                "router.terminationGracePeriodSeconds=120",
                "--set",
                "router.tls.secretName=wp-tls",
                "--set",
                "router.ports.endpointPicker=9002",
                "--set",
                "router.endpointPickerAuth.tokenSecret=wp-picker-token",
                "--set",
                "router.ports.peers=5570",
            ]),
        },
        Case {
            name: "namespaced-rbac",
            args: vec![
                "--set".into(),
                format!("rbac.watchNamespaces[0]={ns}"),
                "--set".into(),
                format!("rbac.secretNamespaces[0]={ns}"),
                "--set".into(),
                "crds.install=false".into(),
            ],
        },
    ]
}

/// Whether Deployment `name`'s pods have a volume from Secret `secret`.
fn mounts_secret(out: &RenderedChart, name: &str, secret: &str) -> bool {
    let d = out.find("Deployment", name).expect("Deployment");
    d["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|v| v["secret"]["secretName"].as_str() == Some(secret))
}

/// Whether `role` (a Role or ClusterRole) lets its subjects get, list and watch Secrets.
fn reads_secrets(role: &serde_yaml::Value) -> bool {
    role["rules"].as_sequence().is_some_and(|rules| {
        rules.iter().any(|r| {
            let has = |key: &str, v: &str| {
                r[key]
                    .as_sequence()
                    .is_some_and(|s| s.iter().any(|x| x.as_str() == Some(v)))
            };
            has("apiGroups", "")
                && has("resources", "secrets")
                && ["get", "list", "watch"].iter().all(|v| has("verbs", v))
        })
    })
}

/// The router's Secret grant (TenantPolicies' API keys): the role and its binding to `subject`.
fn check_router_reads_secrets(
    case: &str,
    out: &RenderedChart,
    role_kind: &str,
    name: &str,
    subject: &str,
) {
    let names = out.kinds_and_names();
    let role = out
        .find(role_kind, name)
        .unwrap_or_else(|| panic!("{case}: {role_kind} {name} in {names:?}"));
    assert!(reads_secrets(role), "{case}: {role:?}");
    let binding_kind = format!("{role_kind}Binding");
    let binding = out
        .find(&binding_kind, name)
        .unwrap_or_else(|| panic!("{case}: {binding_kind} {name} in {names:?}"));
    assert_eq!(str_at(&binding["roleRef"], &["name"]), name, "{case}");
    assert_eq!(
        str_at(&binding["subjects"][0], &["name"]),
        subject,
        "{case}"
    );
}

fn int_at(v: &serde_yaml::Value, path: &[&str]) -> Option<i64> {
    let mut cur = v;
    for key in path {
        cur = cur.get(*key)?;
    }
    cur.as_i64()
}

/// What every rendered variant must satisfy, whatever the values.
fn check_common(case: &str, out: &RenderedChart) {
    // No account the chart creates reads Secrets cluster-wide (TenantPolicies' API keys are
    // read through Roles in the secret namespaces only).
    for role in out.of_kind("ClusterRole") {
        let any_secret = role["rules"].as_sequence().is_some_and(|rules| {
            rules.iter().any(|r| {
                r["resources"].as_sequence().is_some_and(|s| {
                    s.iter()
                        .any(|x| matches!(x.as_str(), Some("secrets" | "*")))
                })
            })
        });
        assert!(
            !any_secret,
            "{case}: ClusterRole {} grants Secrets",
            str_at(role, &["metadata", "name"])
        );
    }
    for deploy in out.of_kind("Deployment") {
        let name = str_at(deploy, &["metadata", "name"]);
        let pod = &deploy["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{case}: {name} pod runAsNonRoot"
        );
        assert_eq!(
            int_at(pod, &["securityContext", "runAsUser"]),
            Some(65532),
            "{case}: {name} runAsUser"
        );
        let containers = pod["containers"].as_sequence().expect("containers");
        for c in containers {
            let sc = &c["securityContext"];
            assert_eq!(
                sc["readOnlyRootFilesystem"].as_bool(),
                Some(true),
                "{case}: {name} read-only root"
            );
            assert_eq!(
                sc["allowPrivilegeEscalation"].as_bool(),
                Some(false),
                "{case}: {name} no escalation"
            );
            assert_eq!(
                sc["capabilities"]["drop"][0].as_str(),
                Some("ALL"),
                "{case}: {name} drops capabilities"
            );
            assert!(
                c["resources"]["requests"].is_mapping(),
                "{case}: {name} has resource requests"
            );
            assert!(
                c["livenessProbe"].is_mapping() && c["readinessProbe"].is_mapping(),
                "{case}: {name} probes"
            );
        }
    }
    for obj in &out.objects {
        let kind = str_at(obj, &["kind"]);
        let cluster_scoped = matches!(
            kind,
            "ClusterRole" | "ClusterRoleBinding" | "CustomResourceDefinition"
        );
        if !cluster_scoped {
            assert!(
                !str_at(obj, &["metadata", "namespace"]).is_empty(),
                "{case}: {kind} has a namespace"
            );
        }
    }
}

fn check_case(case: &str, ns: &str, out: &RenderedChart) {
    check_common(case, out);
    let router = "wp-warmpath-router";
    let controller = "wp-warmpath-controller";
    let names = out.kinds_and_names();
    match case {
        "defaults" | "monitoring-off" => {
            let d = out.find("Deployment", router).expect("router Deployment");
            assert_eq!(int_at(d, &["spec", "replicas"]), Some(2));
            // The router replicas share a session key (tokens signed by one are honoured by
            // the others): a Secret of the chart's, mounted where the config points.
            let key = out
                .find("Secret", "wp-warmpath-router-session-key")
                .expect("session key Secret");
            assert!(key["data"]["key"].as_str().is_some_and(|k| k.len() >= 24));
            // Peering is off: no peers key.
            assert!(out.find("Secret", "wp-warmpath-router-peers-key").is_none());
            let volumes = d["spec"]["template"]["spec"]["volumes"]
                .as_sequence()
                .expect("volumes");
            assert!(volumes
                .iter()
                .any(|v| v["secret"]["secretName"].as_str()
                    == Some("wp-warmpath-router-session-key")));
            let cm = out.find("ConfigMap", router).expect("router ConfigMap");
            assert!(
                cm["data"]["router.yaml"]
                    .as_str()
                    .is_some_and(|c| c.contains("key_file: /var/run/warmpath/session-key/key")),
                "{cm:?}"
            );
            // Leaving fits in the grace period: 5 s accepting, then 50 of the 60 s draining.
            let config: serde_yaml::Value =
                serde_yaml::from_str(cm["data"]["router.yaml"].as_str().unwrap()).unwrap();
            assert_eq!(int_at(&config, &["shutdown", "accept_ms"]), Some(5000));
            assert_eq!(int_at(&config, &["shutdown", "drain_ms"]), Some(50000));
            assert_eq!(
                int_at(
                    d,
                    &["spec", "template", "spec", "terminationGracePeriodSeconds"]
                ),
                Some(60)
            );
            // The API Service publishes the API only; the admin port has a ClusterIP Service
            // of its own; a NetworkPolicy by default, the admin port to the namespace's pods.
            let ports = |name: &str| -> Vec<String> {
                let svc = out
                    .find("Service", name)
                    .unwrap_or_else(|| panic!("{name} in {names:?}"));
                svc["spec"]["ports"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .map(|p| str_at(p, &["name"]).to_owned())
                    .collect()
            };
            assert_eq!(ports(router), ["http"]);
            assert_eq!(ports("wp-warmpath-router-admin"), ["admin"]);
            assert_eq!(
                str_at(
                    out.find("Service", "wp-warmpath-router-admin").unwrap(),
                    &["spec", "type"]
                ),
                "ClusterIP"
            );
            let np = out
                .find("NetworkPolicy", router)
                .expect("a NetworkPolicy by default");
            let ingress = np["spec"]["ingress"].as_sequence().expect("ingress");
            let ports: Vec<&str> = ingress
                .iter()
                .map(|rule| str_at(&rule["ports"][0], &["port"]))
                .collect();
            assert_eq!(ports, ["http", "admin"], "{case}: {np:?}");
            assert!(ingress[1]["from"][0]["podSelector"].is_mapping(), "{np:?}");
            // The router reads pools and replicas from the cluster by default.
            let args = &d["spec"]["template"]["spec"]["containers"][0]["args"];
            assert!(
                args.as_sequence()
                    .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("--kubernetes"))),
                "{case}: router args {args:?}"
            );
            let c = out
                .find("Deployment", controller)
                .expect("controller Deployment");
            assert_eq!(int_at(c, &["spec", "replicas"]), Some(2));
            for kind in ["Service", "ServiceAccount", "PodDisruptionBudget"] {
                assert!(
                    out.find(kind, router).is_some(),
                    "{case}: router {kind} in {names:?}"
                );
                assert!(
                    out.find(kind, controller).is_some(),
                    "{case}: controller {kind} in {names:?}"
                );
            }
            assert!(
                out.find("ClusterRole", &format!("{ns}-{router}")).is_some(),
                "{names:?}"
            );
            assert!(
                out.find("ClusterRole", &format!("{ns}-{controller}"))
                    .is_some(),
                "{names:?}"
            );
            assert!(
                out.find("Role", &format!("{controller}-leader-election"))
                    .is_some(),
                "{names:?}"
            );
            // Every namespace is watched, but Secrets (API keys) are read in the release
            // namespace only; the router's warmpath role itself grants none.
            check_router_reads_secrets(
                case,
                out,
                "Role",
                &format!("{ns}-{router}-secrets"),
                router,
            );
            let plain = out.find("ClusterRole", &format!("{ns}-{router}")).unwrap();
            assert!(!reads_secrets(plain), "{case}: {plain:?}");
            assert_eq!(
                out.of_kind("CustomResourceDefinition").count(),
                3,
                "{case}: CRDs in {names:?}"
            );
            assert_eq!(out.of_kind("ServiceMonitor").count(), 0, "{case}");
            assert_eq!(out.of_kind("PrometheusRule").count(), 0, "{case}");
            assert!(
                out.find("ConfigMap", "wp-warmpath-dashboard").is_none(),
                "{case}"
            );
            // Soft anti-affinity by default.
            assert!(d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                ["preferredDuringSchedulingIgnoredDuringExecution"]
                .is_sequence());
            // CRDs are kept on uninstall.
            for crd in out.of_kind("CustomResourceDefinition") {
                assert_eq!(
                    str_at(crd, &["metadata", "annotations", "helm.sh/resource-policy"]),
                    "keep"
                );
            }
        }
        "ha" => {
            let d = out.find("Deployment", router).expect("router Deployment");
            assert_eq!(int_at(d, &["spec", "replicas"]), Some(5));
            assert!(
                d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
                    ["requiredDuringSchedulingIgnoredDuringExecution"]
                    .is_sequence(),
                "hard anti-affinity"
            );
            // A surge pod would find no free node under hard anti-affinity.
            assert_eq!(
                int_at(d, &["spec", "strategy", "rollingUpdate", "maxSurge"]),
                Some(0)
            );
            let pdb = out.find("PodDisruptionBudget", router).expect("router PDB");
            assert_eq!(int_at(pdb, &["spec", "minAvailable"]), Some(3));
            assert!(
                pdb["spec"].get("maxUnavailable").is_none(),
                "minAvailable replaces maxUnavailable"
            );
            let c = out
                .find("Deployment", controller)
                .expect("controller Deployment");
            assert_eq!(int_at(c, &["spec", "replicas"]), Some(3));
        }
        "network-policy" => {
            // TLS on the API port: the Secret mounted, the router told where, the Service's
            // port named for what it speaks.
            let svc = out.find("Service", router).expect("router Service");
            assert_eq!(str_at(&svc["spec"]["ports"][0], &["name"]), "https");
            assert_eq!(str_at(&svc["spec"]["ports"][0], &["appProtocol"]), "https");
            let cm = out.find("ConfigMap", router).expect("router ConfigMap");
            let config = str_at(cm, &["data", "router.yaml"]);
            assert!(
                config.contains("cert_file: /var/run/warmpath/tls/tls.crt")
                    && config.contains("key_file: /var/run/warmpath/tls/tls.key"),
                "{config}"
            );
            assert!(mounts_secret(out, router, "wp-tls"));
            // The picker asks Gateways for the token in its Secret.
            assert!(
                config.contains("token_file: /var/run/warmpath/picker-token/token"),
                "{config}"
            );
            assert!(mounts_secret(out, router, "wp-picker-token"));
            let np = out
                .find("NetworkPolicy", router)
                .expect("router NetworkPolicy");
            let ingress = np["spec"]["ingress"].as_sequence().expect("ingress");
            let rule = |port: &str| {
                ingress
                    .iter()
                    .find(|r| str_at(&r["ports"][0], &["port"]) == port)
                    .unwrap_or_else(|| panic!("no rule for {port}: {np:?}"))
            };
            assert!(rule("http")["from"].is_null(), "the API is open: {np:?}");
            // The picker's port: the cluster's pods (the Gateway's), not the world.
            assert!(
                rule("grpc-ext-proc")["from"][0]["namespaceSelector"].is_mapping(),
                "{np:?}"
            );
            // Peering's port: the router pods only.
            assert!(
                rule("peers")["from"][0]["podSelector"]["matchLabels"].is_mapping(),
                "{np:?}"
            );
            let from = rule("admin")["from"].as_sequence().expect("admin peers");
            assert_eq!(from.len(), 2, "{np:?}");
            assert!(
                from[0]["podSelector"].is_mapping(),
                "the namespace's pods: {np:?}"
            );
            assert_eq!(
                str_at(
                    &from[1],
                    &[
                        "namespaceSelector",
                        "matchLabels",
                        "kubernetes.io/metadata.name"
                    ]
                ),
                "monitoring"
            );
            // A longer grace period drains longer.
            let cm = out.find("ConfigMap", router).expect("router ConfigMap");
            let config: serde_yaml::Value =
                serde_yaml::from_str(cm["data"]["router.yaml"].as_str().unwrap()).unwrap();
            assert_eq!(int_at(&config, &["shutdown", "drain_ms"]), Some(110000));
            // The controller's pods: their admin port, to the release's namespace, and nothing
            // else.
            let np = out
                .find("NetworkPolicy", controller)
                .expect("controller NetworkPolicy");
            let ingress = np["spec"]["ingress"].as_sequence().expect("ingress");
            assert_eq!(ingress.len(), 1, "{np:?}");
            assert_eq!(str_at(&ingress[0]["ports"][0], &["port"]), "admin");
            assert!(ingress[0]["from"][0]["podSelector"].is_mapping(), "{np:?}");
        }
        "tokenizer-volume" => {
            // A model's tokenizer mounted for routing from KV events (InferencePool
            // `kvEvents.tokenizer` names the path).
            let d = out.find("Deployment", router).expect("router Deployment");
            let pod = &d["spec"]["template"]["spec"];
            let volumes = pod["volumes"].as_sequence().expect("volumes");
            assert!(
                volumes
                    .iter()
                    .any(|v| v["name"].as_str() == Some("tokenizer")
                        && v["configMap"]["name"].as_str() == Some("tiny-tokenizer")),
                "{volumes:?}"
            );
            let mounts = pod["containers"][0]["volumeMounts"]
                .as_sequence()
                .expect("mounts");
            assert!(
                mounts
                    .iter()
                    .any(|m| m["name"].as_str() == Some("tokenizer")
                        && m["mountPath"].as_str() == Some("/etc/warmpath/tokenizers/tiny")),
                "{mounts:?}"
            );
        }
        "sidecar" => {
            assert!(
                out.find("Deployment", router).is_none(),
                "no router Deployment in sidecar mode"
            );
            assert!(out.find("Service", router).is_none());
            assert!(out.find("PodDisruptionBudget", router).is_none());
            assert!(out.find("Deployment", controller).is_some());
            let snippet = out
                .find("ConfigMap", "wp-warmpath-router-sidecar")
                .expect("sidecar snippet");
            let containers: serde_yaml::Value =
                serde_yaml::from_str(str_at(snippet, &["data", "containers.yaml"]))
                    .expect("containers.yaml is YAML");
            assert_eq!(containers[0]["name"].as_str(), Some("router"));
            let binding = out
                .find("ClusterRoleBinding", &format!("{ns}-{router}"))
                .expect("router binding");
            assert_eq!(str_at(&binding["subjects"][0], &["name"]), "vllm");
            assert_eq!(binding["subjects"].as_sequence().map(Vec::len), Some(1));
            check_router_reads_secrets(
                case,
                out,
                "Role",
                &format!("{ns}-{router}-secrets"),
                "vllm",
            );
        }
        "pd-sidecar" => {
            let snippet = out
                .find("ConfigMap", "wp-warmpath-router-sidecar")
                .expect("sidecar snippet");
            let containers: serde_yaml::Value =
                serde_yaml::from_str(str_at(snippet, &["data", "containers.yaml"]))
                    .expect("containers.yaml is YAML");
            let c = &containers[0];
            assert_eq!(c["name"].as_str(), Some("warmpath-pd-sidecar"));
            let args: Vec<&str> = c["args"]
                .as_sequence()
                .expect("args")
                .iter()
                .filter_map(|a| a.as_str())
                .collect();
            assert_eq!(args[0], "sidecar");
            for pair in [
                ["--engine", "http://127.0.0.1:8000"],
                ["--listen", "0.0.0.0:8080"],
                ["--prefill-allow", "10.0.0.0/8"],
                ["--prefill-host", "prefill-0.llm:8000"],
                ["--on-prefill-failure", "decode"],
            ] {
                assert!(args.windows(2).any(|w| w == pair), "{pair:?} in {args:?}");
            }
            // The P/D example's router settings reach the router's file.
            let config = out.find("ConfigMap", router).expect("router ConfigMap");
            let file = str_at(config, &["data", "router.yaml"]);
            assert!(file.contains("connector: sidecar"), "{file}");
            // The flags the chart renders are the ones the binary takes: it starts with them
            // (on free loopback ports) and answers its liveness probe.
            sidecar_starts_with(&args);
        }
        "monitoring-on" => {
            assert_eq!(out.of_kind("ServiceMonitor").count(), 2, "{names:?}");
            for sm in out.of_kind("ServiceMonitor") {
                assert_eq!(str_at(sm, &["metadata", "labels", "release"]), "prometheus");
            }
            // The router's /metrics asks for the admin token: the router reads it from the
            // mounted Secret and its ServiceMonitor sends it.
            let sm = out
                .find("ServiceMonitor", router)
                .expect("router ServiceMonitor");
            let auth = &sm["spec"]["endpoints"][0]["authorization"];
            assert_eq!(str_at(auth, &["type"]), "Bearer");
            assert_eq!(str_at(auth, &["credentials", "name"]), "wp-admin-token");
            let cm = out.find("ConfigMap", router).expect("router ConfigMap");
            assert!(
                str_at(cm, &["data", "router.yaml"])
                    .contains("admin_token_file: /var/run/warmpath/admin-token/token"),
                "{cm:?}"
            );
            assert!(mounts_secret(out, router, "wp-admin-token"));
            // One ConfigMap holds every dashboard file of the chart, each under its file name.
            let dash = out
                .find("ConfigMap", "wp-warmpath-dashboard")
                .expect("dashboard ConfigMap");
            let keys: Vec<&str> = dash["data"]
                .as_mapping()
                .expect("dashboard data")
                .keys()
                .map(|k| k.as_str().expect("key"))
                .collect();
            let files = dashboard_files();
            assert_eq!(keys, file_names(&files), "{case}");
            for path in &files {
                let name = path.file_name().unwrap().to_str().unwrap();
                let rendered: serde_json::Value =
                    serde_json::from_str(str_at(dash, &["data", name]))
                        .unwrap_or_else(|e| panic!("{name} rendered: {e}"));
                assert_eq!(rendered, dashboard_json(path), "{name} renders as written");
            }
            assert_eq!(
                str_at(dash, &["metadata", "labels", "grafana_dashboard"]),
                "1"
            );
            // The alerts' file is the PrometheusRule's spec as written: Helm does not expand
            // its Prometheus templates (`{{ $labels.pod }}`).
            let rule = out
                .find("PrometheusRule", "wp-warmpath")
                .unwrap_or_else(|| panic!("PrometheusRule in {names:?}"));
            assert_eq!(
                str_at(rule, &["metadata", "labels", "release"]),
                "prometheus"
            );
            assert_eq!(str_at(rule, &["metadata", "namespace"]), ns);
            assert_eq!(rule["spec"], alert_file(), "{case}");
            assert!(
                serde_yaml::to_string(&rule["spec"])
                    .unwrap()
                    .contains("{{ $labels.model }}"),
                "{rule:?}"
            );
        }
        "namespaced-rbac" => {
            assert_eq!(
                out.of_kind("ClusterRole").count(),
                0,
                "nothing cluster-wide: {names:?}"
            );
            assert_eq!(out.of_kind("ClusterRoleBinding").count(), 0, "{names:?}");
            assert_eq!(
                out.of_kind("CustomResourceDefinition").count(),
                0,
                "crds.install=false"
            );
            assert!(out.find("Role", router).is_some(), "{names:?}");
            assert!(out.find("Role", controller).is_some(), "{names:?}");
            // The router reads Secrets (API keys) in the watched namespace only.
            check_router_reads_secrets(
                case,
                out,
                "Role",
                &format!("{ns}-{router}-secrets"),
                router,
            );
            let role = out.find("Role", &format!("{ns}-{router}-secrets")).unwrap();
            assert_eq!(str_at(role, &["metadata", "namespace"]), ns, "{case}");
        }
        other => panic!("no checks for case {other}"),
    }
}

#[tokio::test]
async fn values_matrix_renders_and_applies_with_server_side_dry_run() {
    let Some(ns) = TestNamespace::create("chart-matrix").await else {
        return;
    };
    let cluster = ns.cluster();
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    let big_bounds = std::fs::read_dir(repo_root().join("crds"))
        .expect("crds/")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("CRD file"))
        .map(|text| text.matches("maximum: 1000000").count())
        .sum::<usize>();
    assert!(
        big_bounds > 0,
        "crds/ should have a bound of 1000000 to check"
    );
    // ServiceMonitors and PrometheusRules need prometheus-operator's CRDs; copies are
    // installed (shared by all tests, never deleted: cluster-scoped and identical every time).
    cluster
        .apply_crds(&repo_root().join("e2e/fixtures/monitoring"))
        .expect("prometheus-operator CRDs, established");

    for case in matrix(ns.name()) {
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let out = chart
            .template(cluster, RELEASE, ns.name(), &args)
            .unwrap_or_else(|e| panic!("{}: helm template: {e}", case.name));
        check_case(case.name, ns.name(), &out);
        // The CRD template parses and re-serializes the files: numbers must stay as written.
        if case.name == "defaults" {
            assert_eq!(
                out.text.matches("maximum: 1000000").count(),
                big_bounds,
                "big integers survive the CRD template"
            );
        }
        assert!(
            !out.text.contains("e+0"),
            "{}: no number turned into float notation",
            case.name
        );
        let applied = run(
            cluster.kubectl().args([
                "apply",
                "--server-side",
                "--dry-run=server",
                "--field-manager=warmpath-e2e",
                "-n",
                ns.name(),
                "-f",
                "-",
            ]),
            Some(out.text.as_bytes()),
        )
        .unwrap_or_else(|e| {
            panic!(
                "{}: server-side dry-run apply: {e}\n--- manifest ---\n{}",
                case.name, out.text
            )
        });
        let applied = String::from_utf8_lossy(&applied.stdout);
        // kubectl prints one line per object: the API server accepted every one.
        assert_eq!(
            applied
                .lines()
                .filter(|l| l.contains("(server dry run)"))
                .count(),
            out.objects.len(),
            "{}: every object accepted by the API server:\n{applied}",
            case.name
        );
    }
    ns.finish();
}

#[tokio::test]
async fn helm_lint_strict_is_clean() {
    let Some(cluster) = TestCluster::get_or_skip("helm_lint_strict_is_clean") else {
        return;
    };
    let chart = Chart::source_dir();
    let variants: [&[&str]; 4] = [
        &[],
        &["--set", "router.mode=sidecar"],
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.grafanaDashboard.enabled=true",
            "--set",
            "monitoring.prometheusRule.enabled=true",
        ],
        &[
            "--set",
            "rbac.watchNamespaces[0]=ml",
            "--set",
            "crds.install=false",
        ],
    ];
    for args in variants {
        let out = run(
            cluster
                .helm()
                .arg("lint")
                .arg("--strict")
                .arg(&chart)
                .args(args),
            None,
        )
        .unwrap_or_else(|e| panic!("helm lint --strict {args:?}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("0 chart(s) failed"), "{args:?}: {text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "{args:?}: {text}"
        );
    }
}

#[tokio::test]
async fn bad_values_fail_with_a_clear_message() {
    let Some(ns) = TestNamespace::create("bad-values").await else {
        return;
    };
    let cluster = ns.cluster();
    let chart = Chart::source_dir();
    // (values, what the error must name)
    let cases: [(&[&str], &str); 7] = [
        (&["--set", "router.replicas=0"], "replicas"),
        (&["--set", "router.mode=daemonset"], "mode"),
        (&["--set", "router.replicaz=3"], "replicaz"),
        (&["--set-string", "controller.replicas=two"], "replicas"),
        (&["--set", "router.ports.http=70000"], "http"),
        (
            &["--set", "rbac.watchNamespaces[0]=Not_A_Namespace"],
            "watchNamespaces",
        ),
        (
            &["--set", "monitoring.prometheusRule.enable=true"],
            "enable",
        ),
    ];
    for (args, field) in cases {
        let mut cmd = cluster.helm();
        cmd.args(["install", "wp"])
            .arg(&chart)
            .args(["-n", ns.name()])
            .args(args);
        let err = run(&mut cmd, None).expect_err(&format!("{args:?} must be rejected"));
        let msg = err.to_string();
        assert!(
            msg.contains("schema") && msg.contains(field),
            "{args:?}: error must name `{field}`: {msg}"
        );
    }
    // A drain longer than the grace period would let the kubelet kill open streams.
    let mut cmd = cluster.helm();
    cmd.args(["install", "wp"])
        .arg(&chart)
        .args(["-n", ns.name()])
        .args(["--set", "router.config.shutdown.drain_ms=60000"]);
    let err = run(&mut cmd, None).expect_err("a drain past the grace period must be rejected");
    assert!(
        err.to_string().contains("terminationGracePeriodSeconds"),
        "{err}"
    );
    // Nothing was installed by the rejected attempts.
    let out = run(cluster.helm().args(["list", "-q", "-n", ns.name()]), None).expect("helm list");
    assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty());
    ns.finish();
}

/// The chart carries a copy of the repository's generated CRDs (Helm reads no file outside
/// the chart); run deploy/helm/sync-crds.sh when this fails.
#[test]
fn chart_crds_match_repository() {
    let repo = list_yaml_files(&repo_root().join("crds")).expect("crds/");
    let chart =
        list_yaml_files(&Chart::source_dir().join("files/crds")).expect("chart files/crds/");
    let names = |v: &[std::path::PathBuf]| {
        v.iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(&chart),
        names(&repo),
        "chart files/crds/ and crds/ hold different files: run deploy/helm/sync-crds.sh"
    );
    for path in &repo {
        let copy = Chart::source_dir()
            .join("files/crds")
            .join(path.file_name().unwrap());
        assert_eq!(
            read(path),
            read(&copy),
            "{} differs from its chart copy: run deploy/helm/sync-crds.sh",
            path.display()
        );
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The chart's dashboards (each is one key of the dashboard ConfigMap), by file name.
fn dashboard_files() -> Vec<PathBuf> {
    let dir = Chart::source_dir().join("files/dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn file_names(paths: &[PathBuf]) -> Vec<&str> {
    paths
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect()
}

fn dashboard_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The example alerts, the spec of the chart's PrometheusRule.
fn alert_file() -> serde_yaml::Value {
    let path = Chart::source_dir().join("files/alerts/warmpath.rules.yaml");
    serde_yaml::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Series the dashboards may show that no warmpath code or engine exports: the kubelet's
/// (cAdvisor). Keep this short: each entry must be used, and is checked by nothing else.
const OTHER_EXPORTERS: &[&str] = &[
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
];

/// Every sample name the dashboards and alerts may query: the router's and the controller's
/// (the expositions of their own registries, as `/metrics` serves them), vLLM's (the `# TYPE`
/// lines of a real vLLM 0.32.0, which the simulator's tests use too) and [`OTHER_EXPORTERS`].
fn exported_metrics() -> BTreeSet<String> {
    let router = warmpath_router::metrics::Metrics::new().encode();
    let controller = warmpath_controller::metrics::Metrics::new().encode();
    let vllm = read(&repo_root().join("sim/tests/fixtures/vllm-0.32.0/metric_types.txt"));
    let mut known = BTreeSet::new();
    for (source, text, prefix) in [
        ("router", &router, "warmpath_"),
        ("controller", &controller, "warmpath_controller_"),
        ("vLLM", &vllm, "vllm:"),
    ] {
        let samples = monitoring::exposed_samples(text);
        assert!(
            samples.len() >= 5 && samples.iter().all(|s| s.starts_with(prefix)),
            "{source} exports {samples:?}"
        );
        known.extend(samples);
    }
    // A fresh registry has no labelled series at all: these families are found only because
    // the exposition types every registered family, touched or not. Were that to change,
    // every labelled family would need a series created here first.
    for family in [
        "warmpath_flow_refused_total",
        "warmpath_requests_total",
        "warmpath_time_to_first_byte_seconds_bucket",
        "warmpath_controller_reconciles_total",
    ] {
        assert!(
            known.contains(family),
            "{family} missing from a fresh registry's exposition:\n{router}\n{controller}"
        );
    }
    known.extend(OTHER_EXPORTERS.iter().map(|s| s.to_string()));
    known
}

/// Every metric a dashboard panel, a dashboard variable or an alert names is one the code
/// exports (a renamed series breaks its panel silently: Grafana shows "No data"), panels are
/// scoped to the dashboard's namespace and data source, and every alert says how urgent it is
/// and what to look at.
#[test]
fn dashboards_and_alerts_name_only_exported_metrics() {
    let known = exported_metrics();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let files = dashboard_files();
    assert!(
        file_names(&files).contains(&"warmpath.json") && files.len() >= 3,
        "router, flow and engine dashboards: {files:?}"
    );
    let mut uids = BTreeSet::new();
    for path in &files {
        let file = path.file_name().unwrap().to_string_lossy();
        let json = dashboard_json(path);
        let uid = json["uid"].as_str().expect("uid");
        assert!(uids.insert(uid.to_owned()), "{file}: uid {uid} taken");
        let vars = json["templating"]["list"].as_array().expect("variables");
        let var = |name: &str| vars.iter().find(|v| v["name"] == name);
        assert_eq!(
            var("datasource").map(|v| &v["type"]),
            Some(&serde_json::json!("datasource")),
            "{file}: a datasource variable"
        );
        assert!(var("namespace").is_some(), "{file}: a namespace variable");
        let mut ids = BTreeSet::new();
        for panel in monitoring::panels(&json) {
            let title = &panel["title"];
            assert!(
                ids.insert(panel["id"].as_i64().expect("id")),
                "{file}: id of {title}"
            );
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{file}: {title} uses the datasource variable"
            );
        }
        for query in monitoring::dashboard_queries(&json) {
            let selectors = monitoring::selectors(&query.expr);
            if selectors.is_empty() {
                problems.push(format!(
                    "{file} {}: no metric in {:?}",
                    query.place, query.expr
                ));
            }
            for s in selectors {
                if !known.contains(&s.name) {
                    problems.push(format!(
                        "{file} {}: {} is exported by nothing",
                        query.place, s.name
                    ));
                }
                let scoped = ["namespace=\"$namespace\"", "namespace=~\"$namespace\""]
                    .iter()
                    .any(|m| s.matchers.contains(m));
                if query.panel && !scoped {
                    problems.push(format!(
                        "{file} {}: {} is not scoped to $namespace",
                        query.place, s.name
                    ));
                }
                used.insert(s.name);
            }
        }
    }

    let mut alerts = BTreeSet::new();
    let rules = monitoring::alert_rules(&alert_file());
    assert!(rules.len() >= 8, "{} alerts", rules.len());
    for rule in &rules {
        let name = &rule.alert;
        assert!(alerts.insert(name.clone()), "alert {name} twice");
        let selectors = monitoring::selectors(&rule.expr);
        assert!(!selectors.is_empty(), "{name}: no metric in {}", rule.expr);
        for s in selectors {
            if !known.contains(&s.name) {
                problems.push(format!(
                    "alert {name} ({}): {} is exported by nothing",
                    rule.group, s.name
                ));
            }
            used.insert(s.name);
        }
        let r = &rule.rule;
        assert!(
            r["for"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}: a `for` duration"
        );
        assert!(
            matches!(
                r["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ),
            "{name}: severity critical, warning or info"
        );
        for key in ["summary", "description"] {
            assert!(
                r["annotations"][key].as_str().is_some_and(|t| t.len() > 20),
                "{name}: annotation {key}"
            );
        }
    }

    for name in OTHER_EXPORTERS {
        if !used.contains(*name) {
            problems.push(format!(
                "{name} is allowed in OTHER_EXPORTERS but queried nowhere"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "dashboards (files/dashboards/) and alerts (files/alerts/):\n{}",
        problems.join("\n")
    );
    assert!(used.len() >= 60, "{} metrics queried", used.len());
    // Not a failure: a new series may wait for its panel, but it should be seen.
    let unshown: Vec<&String> = known
        .iter()
        .filter(|n| n.starts_with("warmpath_") && !used.contains(*n))
        .filter(|n| !n.ends_with("_sum") && !n.ends_with("_count"))
        .collect();
    eprintln!("warmpath series no dashboard or alert shows: {unshown:?}");
}

/// The configuration file the chart renders is one the router accepts (parsed and validated
/// by the router's own code), with `listen` and `admin` on the ports the Pod exposes.
#[tokio::test]
async fn router_accepts_the_config_the_chart_renders() {
    let Some(cluster) = TestCluster::get_or_skip("router_accepts_the_config_the_chart_renders")
    else {
        return;
    };
    let dir =
        std::env::temp_dir().join(format!("warmpath-e2e-router-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let values = dir.join("values.yaml");
    std::fs::write(
        &values,
        "router:\n  ports: {http: 8000, admin: 9000, endpointPicker: 9002, peers: 5570}\n  config:\n    endpoint_picker: {failure_mode: open}\n    pools:\n      - name: llama\n        models: [llama]\n        replicas:\n          - {name: llama-0, url: \"http://10.0.0.1:8000\"}\n",
    )
    .expect("values");
    let chart = Chart::prepare(&dir).expect("chart copy");
    let out = chart
        .template(
            cluster,
            RELEASE,
            "default",
            &["-f", values.to_str().unwrap()],
        )
        .expect("helm template");
    std::fs::remove_dir_all(&dir).ok();
    let cm = out
        .find("ConfigMap", "wp-warmpath-router")
        .expect("router ConfigMap");
    let text = str_at(cm, &["data", "router.yaml"]);
    // The pod's address, as the kubelet gives it (`POD_IP`, from the downward API).
    let pod_ip = |ip: &'static str| move |name: &str| (name == "POD_IP").then(|| ip.to_owned());
    let config = warmpath_router::config::Config::parse_with_env(text, pod_ip("10.0.0.7"))
        .unwrap_or_else(|e| panic!("router rejects the chart's config: {e}\n{text}"));
    assert_eq!(config.listen.to_string(), "0.0.0.0:8000");
    assert_eq!(config.admin.to_string(), "0.0.0.0:9000");
    assert_eq!(config.pools.len(), 1);
    let deploy = out
        .find("Deployment", "wp-warmpath-router")
        .expect("router Deployment");
    let ports = &deploy["spec"]["template"]["spec"]["containers"][0]["ports"];
    assert_eq!(ports[0]["containerPort"].as_u64(), Some(8000));
    assert_eq!(ports[1]["containerPort"].as_u64(), Some(9000));
    // Endpoint-picker mode: the listener from `router.ports`, the user's other settings kept,
    // the port on the pod and on the Service as cleartext HTTP/2 for the Gateway.
    assert_eq!(
        config
            .endpoint_picker
            .listen
            .map(|a| a.to_string())
            .as_deref(),
        Some("0.0.0.0:9002")
    );
    assert_eq!(
        config.endpoint_picker.failure_mode,
        warmpath_router::config::FailureMode::Open
    );
    assert_eq!(ports[2]["name"].as_str(), Some("grpc-ext-proc"));
    assert_eq!(ports[2]["containerPort"].as_u64(), Some(9002));
    let service = out
        .find("Service", "wp-warmpath-router")
        .expect("router Service");
    let picker = service["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("grpc-ext-proc"))
        .expect("the ext_proc port on the Service");
    assert_eq!(picker["port"].as_u64(), Some(9002));
    assert_eq!(picker["appProtocol"].as_str(), Some("kubernetes.io/h2c"));
    // Peering: the publisher on `router.ports.peers` at the pod's own address (not every
    // interface: loopback is open to the pod's other containers), following every address of
    // the headless Service that selects the router pods (ready or not).
    assert_eq!(config.peers.listen.as_deref(), Some("tcp://10.0.0.7:5570"));
    let ipv6 = warmpath_router::config::Config::parse_with_env(text, pod_ip("fd00::7"))
        .unwrap_or_else(|e| panic!("router rejects the chart's config on IPv6: {e}\n{text}"));
    assert_eq!(ipv6.peers.listen.as_deref(), Some("tcp://[fd00::7]:5570"));
    let env = &deploy["spec"]["template"]["spec"]["containers"][0]["env"];
    let pod_ip_env = env
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("POD_IP"))
        .expect("POD_IP in the router's environment");
    assert_eq!(
        pod_ip_env["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("status.podIP")
    );
    assert_eq!(
        config.peers.routers,
        ["tcp://wp-warmpath-router-peers.default.svc:5570"]
    );
    assert_eq!(ports[3]["name"].as_str(), Some("peers"));
    assert_eq!(ports[3]["containerPort"].as_u64(), Some(5570));
    let headless = out
        .find("Service", "wp-warmpath-router-peers")
        .expect("the peers' headless Service");
    assert_eq!(headless["spec"]["clusterIP"].as_str(), Some("None"));
    assert_eq!(
        headless["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true)
    );
    assert_eq!(
        headless["spec"]["selector"], service["spec"]["selector"],
        "selects the router pods"
    );
    // Placements sealed with a secret the chart makes (kept across upgrades), mounted where
    // the configuration points.
    assert_eq!(
        config.peers.key_file.as_deref(),
        Some(std::path::Path::new("/var/run/warmpath/peers-key/key"))
    );
    let key = out
        .find("Secret", "wp-warmpath-router-peers-key")
        .expect("the peers key Secret");
    let secret = key["data"]["key"].as_str().expect("a key");
    // 48 random characters, base64: more than the 32 bytes the router asks for.
    assert_eq!(secret.len(), 64);
    let pod = &deploy["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"].as_str() == Some("wp-warmpath-router-peers-key"))
        .expect("the peers key volume");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("mounted in the router");
    assert_eq!(
        mount["mountPath"].as_str(),
        Some("/var/run/warmpath/peers-key")
    );
}

/// The kind flow's own manifests (e2e/kind/: the simulated model servers and the chart values
/// pointing the router at them) are accepted by a real API server and by the router, though
/// the kind scripts themselves need Docker and do not run here.
#[tokio::test]
async fn kind_manifests_are_valid() {
    let Some(ns) = TestNamespace::create("kind-manifests").await else {
        return;
    };
    let cluster = ns.cluster();
    let kind = repo_root().join("e2e/kind");
    run(
        cluster
            .kubectl()
            .args([
                "apply",
                "--server-side",
                "--dry-run=server",
                "-n",
                ns.name(),
                "-f",
            ])
            .arg(kind.join("sim.yaml")),
        None,
    )
    .expect("sim.yaml accepted");
    let chart = Chart::prepare(ns.scratch_dir()).expect("chart copy");
    let values = kind.join("values-kind.yaml");
    let out = chart
        .template(
            cluster,
            RELEASE,
            ns.name(),
            &["-f", values.to_str().unwrap()],
        )
        .expect("helm template with values-kind.yaml");
    let cm = out
        .find("ConfigMap", "wp-warmpath-router")
        .expect("router ConfigMap");
    let text = str_at(cm, &["data", "router.yaml"]);
    let config = warmpath_router::config::Config::parse(text)
        .unwrap_or_else(|e| panic!("router rejects the kind config: {e}\n{text}"));
    assert_eq!(config.pools[0].replicas.len(), 2);
    run(
        cluster.kubectl().args([
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=warmpath-e2e",
            "-n",
            ns.name(),
            "-f",
            "-",
        ]),
        Some(out.text.as_bytes()),
    )
    .expect("chart with values-kind.yaml accepted");
    ns.finish();
}

/// Start `warmpath-router` with `args` (the chart's P/D sidecar container), its listeners moved
/// to free loopback ports, and wait for `/healthz`.
fn sidecar_starts_with(args: &[&str]) {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let admin = free();
    let mut argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    for (flag, addr) in [("--listen", free()), ("--admin", admin)] {
        let i = argv.iter().position(|a| a == flag).expect(flag);
        argv[i + 1] = addr.to_string();
    }
    let bin = warmpath_e2e::workspace_bin("warmpath-router").expect("build warmpath-router");
    let mut child = warmpath_e2e::KillOnDrop::spawn(
        std::process::Command::new(bin)
            .args(&argv)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .expect("start the sidecar");
    for _ in 0..100 {
        if let Ok(mut s) = std::net::TcpStream::connect(admin) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut reply = String::new();
            let _ = s.read_to_string(&mut reply);
            if reply.starts_with("HTTP/1.1 200") {
                return;
            }
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("the sidecar exited ({status}) with the chart's arguments {argv:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the sidecar never answered /healthz with the chart's arguments {argv:?}");
}
