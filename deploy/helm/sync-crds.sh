#!/usr/bin/env bash
# Copies the repository's generated CRDs (crds/*.yaml) into the chart (files/crds/), which Helm
# can read; the e2e test chart_crds_match_repository fails while the two differ.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dst="$root/deploy/helm/warmpath/files/crds"
rm -f "$dst"/*.yaml
if compgen -G "$root/crds/*.yaml" >/dev/null; then
  cp "$root"/crds/*.yaml "$dst"/
fi
ls "$dst"
