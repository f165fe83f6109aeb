#!/usr/bin/env bash
# Pins the Dockerfile's two bases to the digests their tags point at now (run where an image
# registry can be reached; commit the result). The builder's tag follows the Dockerfile's
# RUST_VERSION and DEBIAN_RELEASE, so bumping Rust is: edit rust-toolchain.toml and RUST_VERSION,
# then run this.
#
# Usage: deploy/bump-base-digests.sh
# Looks digests up with crane, skopeo or `docker buildx imagetools` (the first found), or with
# KMIRROR_DIGEST_CMD (a command that prints the digest of the reference given as its argument).
# DOCKERFILE changes which file is rewritten (default: the repository's Dockerfile).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dockerfile="${DOCKERFILE:-$root/Dockerfile}"

arg_default() { sed -n "s/^ARG $1=\(.*\)$/\1/p" "$dockerfile" | head -1; }

digest_of() {
  if [ -n "${KMIRROR_DIGEST_CMD:-}" ]; then
    $KMIRROR_DIGEST_CMD "$1"
  elif command -v crane >/dev/null; then
    crane digest "$1"
  elif command -v skopeo >/dev/null; then
    skopeo inspect --format '{{.Digest}}' "docker://$1"
  elif command -v docker >/dev/null; then
    docker buildx imagetools inspect "$1" | awk '$1 == "Digest:" { print $2; exit }'
  else
    echo "no crane, skopeo or docker buildx to look up $1 (or set KMIRROR_DIGEST_CMD)" >&2
    return 1
  fi
}

# pin ARG REFERENCE: ARG's default becomes REFERENCE@<its digest now>.
pin() {
  local digest
  digest="$(digest_of "$2")"
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || {
    echo "unexpected digest for $2: '$digest'" >&2
    return 1
  }
  sed -i "s|^ARG $1=.*$|ARG $1=$2@$digest|" "$dockerfile"
  echo "$1 = $2@$digest"
}

rust="$(arg_default RUST_VERSION)"
debian="$(arg_default DEBIAN_RELEASE)"
runtime="$(arg_default RUNTIME_IMAGE)"
pin BUILDER_IMAGE "docker.io/library/rust:$rust-slim-$debian"
pin RUNTIME_IMAGE "${runtime%@*}"
