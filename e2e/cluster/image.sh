#!/usr/bin/env bash
# Packs one binary as an OCI image archive that `ctr images import` (containerd) loads, without
# Docker or a registry: the binary, the shared libraries `ldd` names (with the dynamic loader),
# an /etc/passwd with the distroless "nonroot" user, and an empty /tmp, in one layer; the
# image config runs it as 65532:65532, as the Dockerfile's images do.
#
#   image.sh BINARY REF OUT.tar [ENTRY_ARG...]
#   e.g. image.sh target/release/warmpath-router docker.io/warmpath/warmpath-router:dev router.tar
#
# The archive is reproducible: files sorted, owned by root, dated at the epoch, so the same
# binary gives the same image digest (and containerd does not re-import an unchanged image).
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: image.sh BINARY REF OUT.tar [ENTRY_ARG...]" >&2; exit 2; }
binary=$(readlink -f "$1"); ref=$2; out=$3; shift 3
[ -x "$binary" ] || { echo "image.sh: $binary is not an executable" >&2; exit 2; }
name=$(basename "$binary")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp"
chmod 1777 "$root/tmp"
cp "$binary" "$root/usr/local/bin/$name"
# Every shared library the binary loads, at the path the loader looks for it (a static binary
# has none; ldd then says so and exits non-zero).
if ldd "$binary" >/dev/null 2>&1; then
  ldd "$binary" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
fi
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"

blobs="$work/oci/blobs/sha256"
mkdir -p "$blobs"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -9 "$work/layer.tar"

python3 - "$work" "$ref" "$name" "$diff_id" "$@" <<'PY'
import hashlib, json, os, shutil, sys
work, ref, name, diff_id, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
blobs = os.path.join(work, "oci", "blobs", "sha256")

def put(data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}

with open(os.path.join(work, "layer.tar.gz"), "rb") as f:
    layer = put(f.read())
config = put(json.dumps({
    "architecture": "amd64", "os": "linux",
    "config": {"User": "65532:65532", "Entrypoint": [f"/usr/local/bin/{name}", *args],
               "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
}, sort_keys=True).encode())
manifest = put(json.dumps({
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}],
}, sort_keys=True).encode())
tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else "latest"
index = {"schemaVersion": 2, "manifests": [{
    "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
    "annotations": {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
}]}
with open(os.path.join(work, "oci", "index.json"), "w") as f:
    json.dump(index, f, sort_keys=True)
with open(os.path.join(work, "oci", "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
PY

mkdir -p "$(dirname "$out")"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out" .
echo "image.sh: $ref ($name) -> $out" >&2
