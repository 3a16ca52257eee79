#!/usr/bin/env bash
# Builds one image per binary from the repository's Dockerfile and loads them into the kind
# cluster's nodes (no registry needed).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need docker kind
for bin in $BINARIES; do
  docker build --target "$bin" --build-arg BINARIES="$bin" -t "$bin:$IMAGE_TAG" "$repo"
  kind load docker-image --name "$KIND_CLUSTER" "$bin:$IMAGE_TAG"
done
