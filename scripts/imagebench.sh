#!/usr/bin/env bash
# Measures worker images as a Fargate start pulls them: the size of each
# layer uncompressed, gzip- and zstd-compressed, and the time of a pull of
# the whole image from a registry into empty container storage, for each
# compression (docs/BENCHMARKS.md, "The worker image").
#
#   scripts/imagebench.sh [-repeats N] NAME=REF...
#   scripts/imagebench.sh before=localhost/galley-worker:test \
#     claude=localhost/galley-worker-claude:test codex=localhost/galley-worker-codex:test
#
# Markdown tables on stdout, progress on stderr. The registry is Debian's
# docker-registry (the CNCF distribution registry, installed with apt-get
# when missing), one fresh instance per compression on a loopback port, so
# no push reuses a blob of the other compression. Each pull goes into a
# fresh storage (podman --root, overlay) and is timed from the command's
# start to its end: the manifest, every blob fetched over loopback,
# decompressed and unpacked, the layers committed. Loopback has no
# bandwidth limit, so the time is the pull's CPU and disk work; a Fargate
# pull adds the transfer from ECR (about the compressed size over the
# task's network). Root only; heavy (it compresses and unpacks each image
# several times): run it under the machine's heavy-work lock.
set -euo pipefail

repeats=3
if [ "${1:-}" = "-repeats" ]; then repeats=$2; shift 2; fi
[ $# -gt 0 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "imagebench: must run as root (rootful container storage)" >&2; exit 1; }
command -v docker-registry > /dev/null || flock /var/lock/galley-apt.lock apt-get -o DPkg::Lock::Timeout=600 install -y -q docker-registry >&2
say() { echo "imagebench: $*" >&2; }

work=$(mktemp -d /var/tmp/imagebench-XXXXXX)
registry_pid=
cleanup() {
  [ -n "$registry_pid" ] && kill "$registry_pid" 2> /dev/null && wait "$registry_pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

start_registry() {
  local dir=$work/registry-$1
  mkdir -p "$dir/data"
  cat > "$dir/config.yml" << EOF
version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: $dir/data
http:
  addr: 127.0.0.1:$port
EOF
  docker-registry serve "$dir/config.yml" > "$dir/log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 50); do
    curl -fsS "http://127.0.0.1:$port/v2/" > /dev/null 2>&1 && return
    sleep 0.1
  done
  cat "$dir/log" >&2
  exit 1
}

stop_registry() {
  kill "$registry_pid"
  wait "$registry_pid" 2> /dev/null || true
  registry_pid=
}

now() { date +%s.%N; }

# Per image: the layers' uncompressed sizes (an OCI layout saved
# uncompressed) and what made each (the config's history, empty layers
# left out).
declare -A raw_sizes created
for arg in "$@"; do
  name=${arg%%=*} ref=${arg#*=}
  d=$work/raw-$name
  say "$name: saving $ref uncompressed"
  podman image save -q --uncompressed --format oci-dir -o "$d" "$ref" > /dev/null
  python3 - "$d" > "$work/$name.layers" << 'EOF'
import json, os, sys
d = sys.argv[1]
blob = lambda dg: os.path.join(d, "blobs", *dg.split(":", 1))
index = json.load(open(os.path.join(d, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
history = [h for h in config.get("history", []) if not h.get("empty_layer")]
for i, layer in enumerate(manifest["layers"]):
    by = history[i].get("created_by", "") if i < len(history) else ""
    by = " ".join(by.replace("/bin/sh -c #(nop) ", "").replace("/bin/sh -c ", "RUN ").split())
    print(f"{layer['size']}\t{by[:90]}")
EOF
  rm -rf "$d"
done

declare -A pulls
for comp in gzip zstd; do
  start_registry "$comp"
  for arg in "$@"; do
    name=${arg%%=*} ref=${arg#*=}
    dest=127.0.0.1:$port/galley/$name:$comp
    say "$name: pushing $comp layers to the registry"
    podman push -q --tls-verify=false --format oci --compression-format "$comp" "$ref" "docker://$dest" > /dev/null
    # What the registry holds: each layer's media type and size.
    curl -fsS -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
      "http://127.0.0.1:$port/v2/galley/$name/manifests/$comp" > "$work/$name.$comp.manifest"
    python3 - "$work/$name.$comp.manifest" "$comp" > "$work/$name.$comp.sizes" << 'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
for l in m["layers"]:
    if not l["mediaType"].endswith("+" + sys.argv[2]) and not l["mediaType"].endswith("." + sys.argv[2]):
        sys.exit("layer of media type %s, want %s" % (l["mediaType"], sys.argv[2]))
    print(l["size"])
EOF
    times=()
    for r in $(seq "$repeats"); do
      root=$work/pull-root run=$work/pull-run
      rm -rf "$root" "$run"
      sync
      t0=$(now)
      podman --root "$root" --runroot "$run" --storage-driver overlay pull -q --tls-verify=false "$dest" > /dev/null
      t1=$(now)
      times+=("$(python3 -c "print(f'{$t1 - $t0:.1f}')")")
      podman --root "$root" --runroot "$run" --storage-driver overlay rmi -af > /dev/null 2>&1 || true
      rm -rf "$root" "$run"
    done
    say "$name $comp pulls: ${times[*]} s"
    pulls[$name.$comp]="${times[*]}"
  done
  stop_registry
done

mb() { python3 -c "print(f'{$1 / 1e6:,.1f}')"; }
for arg in "$@"; do
  name=${arg%%=*} ref=${arg#*=}
  echo
  echo "#### $name ($ref)"
  echo
  echo "| layer | uncompressed MB | gzip MB | zstd MB |"
  echo "| --- | ---: | ---: | ---: |"
  paste "$work/$name.layers" "$work/$name.gzip.sizes" "$work/$name.zstd.sizes" |
    python3 -c '
import sys
tot = [0, 0, 0]
for line in sys.stdin:
    raw, by, gz, zs = line.rstrip("\n").split("\t")
    raw, gz, zs = int(raw), int(gz), int(zs)
    tot = [tot[0] + raw, tot[1] + gz, tot[2] + zs]
    print(f"| `{by}` | {raw/1e6:,.1f} | {gz/1e6:,.1f} | {zs/1e6:,.1f} |")
print(f"| **image** | **{tot[0]/1e6:,.1f}** | **{tot[1]/1e6:,.1f}** | **{tot[2]/1e6:,.1f}** |")
'
  echo
  echo "pull from the registry into empty storage, $repeats runs: gzip ${pulls[$name.gzip]} s; zstd ${pulls[$name.zstd]} s"
done
