#!/usr/bin/env bash
# Installs (or upgrades) the chart into the kind cluster with the locally built images and
# waits for both Deployments to roll out and for a controller to hold the Lease. Deploys
# warmpath-sim (sim.yaml) first as the model servers the router's static pool points at.
# Extra arguments go to `helm upgrade --install` (e.g. --set router.replicas=3).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need helm kubectl
export KUBECONFIG="$kubeconfig"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
sim_image="warmpath-sim:$IMAGE_TAG"
sed "s|image: warmpath-sim:dev|image: $sim_image|" "$kind_dir/sim.yaml" | kubectl -n "$NAMESPACE" apply -f -
kubectl -n "$NAMESPACE" rollout status deployment/warmpath-sim --timeout 3m
helm upgrade --install "$RELEASE" "$repo/deploy/helm/warmpath" \
  --namespace "$NAMESPACE" -f "$kind_dir/values-kind.yaml" \
  --set router.image.repository=warmpath-router --set router.image.tag="$IMAGE_TAG" \
  --set router.image.pullPolicy=Never \
  --set controller.image.repository=warmpath-controller --set controller.image.tag="$IMAGE_TAG" \
  --set controller.image.pullPolicy=Never \
  --wait --timeout 5m "$@"
fullname="$RELEASE-warmpath"
[[ "$RELEASE" == *warmpath* ]] && fullname="$RELEASE"
kubectl -n "$NAMESPACE" rollout status "deployment/$fullname-router" --timeout 3m
kubectl -n "$NAMESPACE" rollout status "deployment/$fullname-controller" --timeout 3m
for _ in $(seq 1 60); do
  holder="$(kubectl -n "$NAMESPACE" get lease "$fullname-controller" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)"
  if [ -n "$holder" ]; then echo "controller leader: $holder"; exit 0; fi
  sleep 2
done
echo "install.sh: no controller took the Lease $NAMESPACE/$fullname-controller within 2 minutes" >&2
exit 1
