//! warmpath's custom resources as dynamic objects, for tests that write them the way users do:
//! plain JSON specs, invalid ones included, which the typed API would not let them express.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{json, Value};

/// Kind and plural of every warmpath resource.
pub const WARMPATH_KINDS: [(&str, &str); 3] = [
    ("InferencePool", "inferencepools"),
    ("InferenceReplica", "inferencereplicas"),
    ("TenantPolicy", "tenantpolicies"),
];

/// The `warmpath.dev/v1` resource of `kind` (panics on a kind that is not warmpath's).
pub fn warmpath_resource(kind: &str) -> ApiResource {
    // Spelled out: the library does not depend on warmpath-api (only the tests do).
    warmpath_resource_at("v1", kind)
}

/// The resource of `kind` at API `version` (`v1`, or the deprecated `v1alpha1` the API server
/// still serves), for tests that cross versions.
pub fn warmpath_resource_at(version: &str, kind: &str) -> ApiResource {
    let plural = WARMPATH_KINDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, p)| *p)
        .unwrap_or_else(|| panic!("{kind} is not a warmpath kind"));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(crate::GROUP, version, kind), plural)
}

/// The API of `kind` objects in namespace `ns`.
pub fn warmpath_api(client: &kube::Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &warmpath_resource(kind))
}

/// A `kind` object named `name` with this `spec`.
pub fn warmpath_object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    DynamicObject::new(name, &warmpath_resource(kind)).data(json!({ "spec": spec }))
}
