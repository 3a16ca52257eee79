{{/*
RBAC rules. The router only reads warmpath resources, llm-d InferenceObjectives and the
Secrets holding TenantPolicies' API keys (no Pods, no writes); the controller is their single writer. Kept here so the
ClusterRole and the per-namespace Roles cannot drift.
*/}}
{{- define "warmpath.router.rules" -}}
- apiGroups: [warmpath.dev]
  resources: [inferencepools, inferencereplicas, tenantpolicies]
  verbs: [get, list, watch]
- apiGroups: [warmpath.dev]
  resources: [inferencepools/status, inferencereplicas/status, tenantpolicies/status]
  verbs: [get]
# llm-d InferenceObjectives: their priorities (watched only when the API server serves them).
- apiGroups: [llm-d.ai]
  resources: [inferenceobjectives]
  verbs: [get, list, watch]
{{- end }}

{{- /* Read-only: the router never writes a Secret. */ -}}
{{- define "warmpath.router.secretRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch]
{{- end }}

{{- define "warmpath.controller.rules" -}}
- apiGroups: [warmpath.dev]
  resources: [tenantpolicies]
  verbs: [get, list, watch]
# InferencePools: written only for GIE pools it mirrors (labelled warmpath.dev/source=gie).
- apiGroups: [warmpath.dev]
  resources: [inferencepools, inferencereplicas]
  verbs: [get, list, watch, create, update, patch, delete]
# Gateway API Inference Extension pools, read to mirror them (unused when GIE's CRD is absent).
- apiGroups: [inference.networking.k8s.io]
  resources: [inferencepools]
  verbs: [get, list, watch]
- apiGroups: [warmpath.dev]
  resources: [inferencepools/status, inferencereplicas/status, tenantpolicies/status]
  verbs: [get, update, patch]
# Owner references with blockOwnerDeletion (InferenceReplica -> InferencePool) need this when
# the OwnerReferencesPermissionEnforcement admission plugin is on.
- apiGroups: [warmpath.dev]
  resources: [inferencepools/finalizers]
  verbs: [update]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
