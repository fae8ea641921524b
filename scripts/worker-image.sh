#!/usr/bin/env bash
# Builds galley's worker images, one per agent family (worker/Dockerfile's
# targets worker-claude and worker-codex), on this machine with buildah and
# runc, and prints their references (docs/worker-image.md).
#
#   scripts/worker-image.sh build        # build both; the refs on stdout, progress on stderr
#   scripts/worker-image.sh --print-ref  # the refs the current inputs build, without building
#
# The refs are printed as one line, claude=<ref>,codex=<ref> (the value of
# GALLEY_WORKER_IMAGE), each localhost/galley-worker-<family>:<hash of the
# build's inputs>; each image is also tagged :test. The Dockerfile's bases
# (golang:1.26, node:22-bookworm-slim, debian:bookworm-slim) cannot be pulled here, so they are
# made from Debian's, npm's and the Go module proxy's packages, each
# download checked against a pinned checksum, and stored under the names
# the Dockerfile uses; each is made once per machine, keyed by its recipe.
# Downloads during the build trust $GALLEY_BUILD_CA (default: the host's CA
# bundle) through a build secret, never a layer. Idempotent; installs
# buildah, podman, runc and debootstrap with apt-get when missing. Root only.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
work=${GALLEY_IMAGE_WORK:-/var/tmp/galley-image}
ca_bundle=${GALLEY_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
repo=localhost/galley-worker
# The agent families, each a target of worker/Dockerfile (worker-<family>).
families=(claude codex)

# The bases' pins. Node's package on npm holds only the node binary, its
# headers and docs; npm comes from its own package, as Node's release
# bundles it. Integrities are the registry's dist.integrity for each tarball.
debian_suite=bookworm
debian_mirror=${GALLEY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
node_version=22.23.5
node_integrity_x64=sha512-3jhC+wcoWxKZxcRqF2sUSl0c9HEXFnur/nuIPx6O6CWKV0jOUWQm7Htw5SuXqqlMCEhi0cJqybFPEb5hhcBiMw==
node_integrity_arm64=sha512-e1LOUGKVruPGuLVutn8+Cgm5pI1APm4Kvh+zbb/qe/ZpD9s+TQby5iUgZOWmPpbSKpj0Td8DP1N0NEnXasHizg==
npm_version=10.9.9
npm_integrity=sha512-1g+6jLQvaIuB4zwvHL7yrXuXcWZwDsCtBX8bbWDqbvJSSr9nPiDDWTHNgwXR27iIcTTW7v3A57hDW9RYv2W4Yg==
# The Go toolchain as the Go module proxy serves it, checked by the go
# command against the checksum database (GOSUMDB), like a toolchain switch.
go_version=1.26.8

debian_image=localhost/galley-base/debian:bookworm-slim
# The name worker/Dockerfile's runtime stage uses for it.
debian_alias=docker.io/library/debian:bookworm-slim
node_image=docker.io/library/node:22-bookworm-slim
golang_image=docker.io/library/golang:1.26
key_label=run.galley.base-key

case $(uname -m) in
  x86_64 | amd64) darch=amd64 narch=x64 node_integrity=$node_integrity_x64 ;;
  aarch64 | arm64) darch=arm64 narch=arm64 node_integrity=$node_integrity_arm64 ;;
  *) echo "worker image: unsupported architecture $(uname -m)" >&2; exit 1 ;;
esac

say() { echo "worker image: $*" >&2; }

# runc, since crun refuses this machine's cgroup layout; explicit ulimits,
# since a sandbox without CAP_SYS_RESOURCE cannot raise them to buildah's
# defaults. GALLEY_CONTAINER_ULIMITS overrides (space-separated).
runtime_flags=(--runtime runc)
ulimit_flags=()
for u in ${GALLEY_CONTAINER_ULIMITS:-nofile=4096:4096 nproc=1000:1000}; do ulimit_flags+=(--ulimit "$u"); done

# Each base's key: its recipe (the function that makes it, the pins it
# reads, the architecture) and the key of the base under it.
recipe_key() {
  { declare -f "$1"; echo "$debian_suite $debian_mirror $darch $node_version $node_integrity $npm_version $npm_integrity $go_version"; echo "${2:-}"; } |
    sha256sum | cut -c1-16
}

image_key() { podman image inspect --format "{{index .Labels \"$key_label\"}}" "$1" 2>/dev/null || true; }

ensure_tools() {
  local missing=()
  for t in buildah:buildah podman:podman runc:runc debootstrap:debootstrap newuidmap:uidmap slirp4netns:slirp4netns fuse-overlayfs:fuse-overlayfs; do
    command -v "${t%%:*}" > /dev/null || missing+=("${t#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" -eq 0 ] || { say "needs root to install ${missing[*]}"; exit 1; }
  say "installing ${missing[*]}"
  # One apt at a time (make test may install the browser beside this:
  # scripts/browser-deps.sh takes the same lock).
  local apt=(flock /var/lock/galley-apt.lock apt-get -o DPkg::Lock::Timeout=600)
  "${apt[@]}" update -q >&2
  DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -q "${missing[@]}" >&2
}

# Checks a downloaded file against an npm-style integrity (sha512-<base64>).
check_integrity() {
  local got
  got="sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
  [ "$got" = "$2" ] || { say "$1: integrity $got, want $2"; exit 1; }
}

# bookworm-slim: debootstrap's minbase from the Debian mirror apt uses,
# slimmed as debuerreotype slims the official image (no docs, man pages or
# locales, now or in later installs), apt sources as the official image's.
make_debian() {
  local dir
  dir=$(mktemp -d "$work/debian-XXXXXX")
  say "making $debian_image: debootstrap $debian_suite ($darch) from $debian_mirror"
  debootstrap --variant=minbase --arch="$darch" "$debian_suite" "$dir/rootfs" "$debian_mirror" > "$dir/debootstrap.log" 2>&1 ||
    { tail -20 "$dir/debootstrap.log" >&2; exit 1; }
  local r=$dir/rootfs
  cat > "$r/etc/dpkg/dpkg.cfg.d/docker" << 'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$r/usr/share/man/"* "$r/usr/share/info/"* "$r/usr/share/groff/"* "$r/usr/share/lintian/"*
  find "$r/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  rm -f "$r/etc/apt/sources.list"
  cat > "$r/etc/apt/sources.list.d/debian.sources" << EOF
Types: deb
URIs: $debian_mirror
Suites: $debian_suite $debian_suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${debian_mirror%/debian}/debian-security
Suites: $debian_suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb "$r/var/log/"*.log "$r/var/log/apt/"* "$r/tmp/"*
  : > "$r/etc/hostname"
  tar --numeric-owner -C "$r" -c . |
    podman import --change 'CMD ["bash"]' --change "LABEL $key_label=$1" - "$debian_image" > /dev/null
  rm -rf "$dir"
}

# node:22-bookworm-slim's layout: node, npm and npx in /usr/local/bin, npm
# in /usr/local/lib/node_modules, the node user (uid 1000), the official
# entry point script and CMD ["node"].
make_node() {
  local dir
  dir=$(mktemp -d "$work/node-XXXXXX")
  say "making $node_image: node-linux-$narch@$node_version and npm@$npm_version from npm"
  (cd "$dir" && npm pack --silent "node-linux-$narch@$node_version" "npm@$npm_version" > /dev/null)
  check_integrity "$dir/node-linux-$narch-$node_version.tgz" "$node_integrity"
  check_integrity "$dir/npm-$npm_version.tgz" "$npm_integrity"
  local u=$dir/ctx/usr/local
  mkdir -p "$u/lib/node_modules/npm" "$dir/n"
  tar -xzf "$dir/node-linux-$narch-$node_version.tgz" -C "$dir/n" --no-same-owner
  cp -a "$dir/n/package/bin" "$dir/n/package/include" "$dir/n/package/share" "$u/"
  tar -xzf "$dir/npm-$npm_version.tgz" -C "$u/lib/node_modules/npm" --strip-components=1 --no-same-owner
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$u/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$u/bin/npx"
  cat > "$u/bin/docker-entrypoint.sh" << 'EOF'
#!/bin/sh
set -e

# Run command with node if the first argument contains a "-" or is not a system command. The last
# part inside the "{}" is a workaround for the following bug in ash/dash:
# https://bugs.debian.org/cgi-bin/bugreport.cgi?bug=874264
if [ "${1#-}" != "${1}" ] || [ -z "$(command -v "${1}")" ] || { [ -f "${1}" ] && ! [ -x "${1}" ]; }; then
  set -- node "$@"
fi

exec "$@"
EOF
  # Modes made right before the COPY, so no layer rewrites them.
  chmod -R u=rwX,go=rX "$dir/ctx"
  chmod 0755 "$u/bin/node" "$u/bin/docker-entrypoint.sh" "$u/lib/node_modules/npm/bin/npm-cli.js" \
    "$u/lib/node_modules/npm/bin/npx-cli.js" "$u/lib/node_modules/npm/bin/node-gyp-bin/node-gyp"
  cat > "$dir/Containerfile" << EOF
FROM $debian_image
RUN groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node
ENV NODE_VERSION=$node_version
COPY ctx/ /
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["node"]
LABEL $key_label=$1
EOF
  build_base "$dir" "$node_image"
}

# golang:1.26 as far as this build needs it: bookworm with the toolchain in
# /usr/local/go, GOPATH /go, GOTOOLCHAIN=local, and the packages the
# official image's buildpack-deps:scm base gives go's downloads
# (ca-certificates, git, netbase). No C compiler: the harness builds with
# CGO_ENABLED=0.
make_golang() {
  local dir mod
  dir=$(mktemp -d "$work/golang-XXXXXX")
  mod=golang.org/toolchain@v0.0.1-go$go_version.linux-$darch
  say "making $golang_image: $mod from the Go module proxy"
  mod=$(cd "$dir" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -x "$mod/bin/go" ] || [ -f "$mod/bin/go" ] || { say "toolchain download failed"; exit 1; }
  mkdir -p "$dir/ctx/usr/local"
  cp -r "$mod" "$dir/ctx/usr/local/go"
  # Module zips keep no modes: make the tree readable and the tools
  # executable, as the go command does when it switches toolchains.
  chmod -R u=rwX,go=rX "$dir/ctx"
  find "$dir/ctx/usr/local/go/bin" "$dir/ctx/usr/local/go/pkg/tool" -type f -exec chmod 0755 {} +
  cat > "$dir/Containerfile" << EOF
FROM $debian_image
RUN apt-get update \\
 && apt-get install -y --no-install-recommends ca-certificates git netbase \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /go/src /go/bin \\
 && chmod -R 1777 /go
ENV GOLANG_VERSION=$go_version GOTOOLCHAIN=local GOPATH=/go \\
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY ctx/ /
WORKDIR /go
LABEL $key_label=$1
EOF
  build_base "$dir" "$golang_image"
}

build_base() {
  buildah bud "${runtime_flags[@]}" "${ulimit_flags[@]}" --pull=never --layers -q \
    -f "$1/Containerfile" -t "$2" "$1" > "$1/build.log" 2>&1 || { tail -30 "$1/build.log" >&2; exit 1; }
  rm -rf "$1"
}

debian_key=$(recipe_key make_debian)
node_key=$(recipe_key make_node "$debian_key")
golang_key=$(recipe_key make_golang "$debian_key")

# The hash of everything the build reads (the context the .dockerignore
# lets through, the Dockerfile, the bases' keys, the architecture), so a
# ref names one build's inputs.
worker_hash() {
  local files
  files=$(cd "$here" && git ls-files -co --exclude-standard -- go.mod go.sum pkg cmd worker |
    grep -v -E '(_test\.go$|(^|/)testdata/)' | LC_ALL=C sort -u)
  local h
  h=$({
    cd "$here"
    while IFS= read -r f; do [ -f "$f" ] && sha256sum -- "$f"; done <<< "$files"
    echo "$darch $debian_key $node_key $golang_key"
  } | sha256sum | cut -c1-16)
  echo "$h"
}

# The refs, as GALLEY_WORKER_IMAGE holds them: family=ref, comma-separated.
worker_refs() {
  local h out=() f
  h=$(worker_hash)
  for f in "${families[@]}"; do out+=("$f=$repo-$f:$h"); done
  (IFS=,; echo "${out[*]}")
}

build() {
  [ "$(id -u)" -eq 0 ] || { say "must run as root (rootful buildah storage)"; exit 1; }
  ensure_tools
  mkdir -p "$work"
  # One build at a time per machine: helpers and make targets may race.
  exec 9> "$work/.lock"
  flock 9
  local start=$SECONDS made=0
  [ "$(image_key "$debian_image")" = "$debian_key" ] || { make_debian "$debian_key"; made=1; }
  [ "$(image_key "$node_image")" = "$node_key" ] || { make_node "$node_key"; made=1; }
  [ "$(image_key "$golang_image")" = "$golang_key" ] || { make_golang "$golang_key"; made=1; }
  # The Dockerfile names the Debian base as the official image's.
  podman image exists "$debian_alias" && [ "$(image_key "$debian_alias")" = "$debian_key" ] ||
    podman tag "$debian_image" "$debian_alias"
  local h secret=() f steps=0 cached=0 kind size ref sizes=()
  h=$(worker_hash)
  [ -f "$ca_bundle" ] && secret=(--secret "id=build-ca,src=$ca_bundle")
  # One target at a time: the second takes the shared stages (the harness,
  # the agents, the runtime) from the layer cache.
  for f in "${families[@]}"; do
    local log=$work/build-$f.log
    ref=$repo-$f:$h
    say "building $ref from worker/Dockerfile, target worker-$f (log: $log)"
    # --platform sets TARGETOS and TARGETARCH, which buildah leaves unset
    # otherwise; --jobs 2 builds the harness and the agents stages at once.
    if ! (cd "$here" && buildah bud "${runtime_flags[@]}" "${ulimit_flags[@]}" --pull=never --layers \
      --platform "linux/$darch" --jobs 2 --ignorefile worker/.dockerignore -f worker/Dockerfile "${secret[@]}" \
      --target "worker-$f" -t "$ref" -t "$repo-$f:test" . > "$log" 2>&1); then
      tail -40 "$log" >&2
      say "build of worker-$f failed"
      exit 1
    fi
    steps=$((steps + $(grep -E '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+: ' "$log" | grep -c -v -E ': FROM ' || true)))
    cached=$((cached + $(grep -c -- '--> Using cache' "$log" || true)))
    size=$(podman image inspect --format '{{.Size}}' "$ref")
    sizes+=("$f $((size / 1000000)) MB")
  done
  # Warm: the bases were there and the layer cache answered at least once.
  if [ "$made" -eq 0 ] && [ "$cached" -gt 0 ]; then kind=warm; else kind=cold; fi
  say "built in $((SECONDS - start))s ($kind: $cached of $steps steps from the layer cache), sizes: $(IFS=,; echo "${sizes[*]}")"
  worker_refs
}

case ${1:-} in
  build) build ;;
  --print-ref | ref) worker_refs ;;
  *) echo "usage: $0 build | --print-ref" >&2; exit 2 ;;
esac
