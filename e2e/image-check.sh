#!/usr/bin/env bash
# Builds the repository's Dockerfile without a container engine and without an image registry,
# then checks the image. Needs root, buildah and debootstrap (Debian packages) and reaches only
# the Debian archive and crates.io.
#
# The two bases of the Dockerfile cannot be pulled here, so stand-ins are built once under the
# same names (docs/image.md):
#   docker.io/library/rust:<RUST_VERSION>-slim-bookworm  Debian bookworm (debootstrap, minbase)
#       with this machine's Rust toolchain of that version in /usr/local/{rustup,cargo}, laid out
#       like the official image, and this machine's CA bundle;
#   gcr.io/distroless/cc-debian12:nonroot  the Debian packages distroless "cc" is made of
#       (libc6, libgcc-s1, libgomp1, libstdc++6, libssl3, tzdata, netbase, base-files), unpacked,
#       plus CA certificates and the users root and nonroot (65532). No shell, no libz.
# Then `buildah bud --pull=never` runs the unchanged Dockerfile (its bases by tag, not by digest:
# BUILDER_IMAGE and RUNTIME_IMAGE name the stand-ins), and the result is checked: user,
# entrypoint, the three binaries, and each binary starting (--version) inside the image.
#
# Usage: e2e/image-check.sh [--rebuild-bases] [--keep]
#   KMIRROR_IMAGE_STORE  buildah storage (default ~/.cache/kmirror/buildah, vfs driver)
#   KMIRROR_IMAGE        tag of the built image (default localhost/kmirror:check)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

rebuild_bases=0 keep=0
for arg in "$@"; do
  case "$arg" in
    --rebuild-bases) rebuild_bases=1 ;;
    --keep) keep=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

store="${KMIRROR_IMAGE_STORE:-$HOME/.cache/kmirror/buildah}"
image="${KMIRROR_IMAGE:-localhost/kmirror:check}"
bh() { buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs "$@"; }
log() { printf '[image-check %4ss] %s\n' "$SECONDS" "$*"; }
die() { echo "image-check: $*" >&2; exit 1; }

for tool in buildah debootstrap dpkg-deb rustup; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y buildah debootstrap)"
done
[ "$(id -u)" = 0 ] || die "run as root (buildah --isolation chroot and debootstrap need it)"

arg_default() { sed -n "s/^ARG $1=\(.*\)$/\1/p" Dockerfile | head -1; }
rust_version="$(arg_default RUST_VERSION)"
debian="$(arg_default DEBIAN_RELEASE)"
[ -n "$rust_version" ] && [ -n "$debian" ] || die "Dockerfile lacks ARG RUST_VERSION / DEBIAN_RELEASE"
# The Dockerfile pins its bases by digest; the stand-ins carry the same names and tags but not
# those digests, so the build is told to use them by tag (BUILDER_IMAGE, RUNTIME_IMAGE).
rust_base="$(arg_default BUILDER_IMAGE)"
rust_base="${rust_base%@*}"
[ "$rust_base" = "docker.io/library/rust:${rust_version}-slim-${debian}" ] ||
  die "the builder base is $rust_base, not rust:${rust_version}-slim-${debian}"
runtime_base="$(arg_default RUNTIME_IMAGE)"
runtime_base="${runtime_base%@*}"
[ "$runtime_base" = "gcr.io/distroless/cc-debian12:nonroot" ] ||
  die "the runtime base is $runtime_base; this script only knows how to stand in for distroless cc-debian12"

work="$store/work"
mkdir -p "$work"

has_image() { bh images --noheading --format '{{.Name}}:{{.Tag}}' | grep -qx "$1"; }

commit_dir() { # rootfs-dir image [buildah config options...]
  local dir="$1" name="$2"; shift 2
  local ctr
  ctr="$(bh from scratch)"
  bh copy "$ctr" "$dir/" / >/dev/null
  bh config "$@" "$ctr"
  bh commit --rm "$ctr" "$name" >/dev/null
}

build_rust_base() {
  log "stand-in for $rust_base: debootstrap $debian"
  local rootfs="$work/rust-rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase "$debian" "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed, see $work/debootstrap.log"
  printf 'deb http://deb.debian.org/debian %s main\ndeb http://deb.debian.org/debian %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
    "$debian" "$debian" "$debian" >"$rootfs/etc/apt/sources.list"
  # The official image has ca-certificates; this machine's bundle is used instead, because it
  # also holds the anchors of the TLS-inspecting proxy that crates.io is reached through here.
  mkdir -p "$rootfs/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  apt-get clean -o RootDir="$rootfs" 2>/dev/null || true
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
  local toolchain host_triple
  host_triple="$(rustc +"$rust_version" -vV | sed -n 's/^host: //p')"
  toolchain="$(readlink -f "$(rustc +"$rust_version" --print sysroot)")"
  [ -x "$toolchain/bin/cargo" ] || die "no Rust $rust_version toolchain on this machine"
  log "copying Rust $rust_version from $toolchain"
  mkdir -p "$rootfs/usr/local/rustup/toolchains" "$rootfs/usr/local/cargo/bin"
  cp -a "$toolchain/." "$rootfs/usr/local/rustup/toolchains/${rust_version}-${host_triple}/"
  rm -rf "$rootfs/usr/local/rustup/toolchains/${rust_version}-${host_triple}/share/doc"
  printf 'version = "12"\ndefault_toolchain = "%s-%s"\nprofile = "minimal"\n' "$rust_version" "$host_triple" \
    >"$rootfs/usr/local/rustup/settings.toml"
  cp "$(command -v rustup)" "$rootfs/usr/local/cargo/bin/rustup"
  for proxy in cargo rustc rustdoc; do ln -sf rustup "$rootfs/usr/local/cargo/bin/$proxy"; done
  commit_dir "$rootfs" "$rust_base" \
    --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env RUST_VERSION="$rust_version" --workingdir /
  rm -rf "$rootfs"
}

build_runtime_base() {
  log "stand-in for $runtime_base: unpacking Debian packages"
  local rootfs="$work/runtime-rootfs" debs="$work/debs"
  rm -rf "$rootfs" "$debs"
  mkdir -p "$rootfs" "$debs"
  (cd "$debs" && apt-get download base-files netbase tzdata libc6 libgcc-s1 libgomp1 libstdc++6 libssl3 \
    >"$work/apt-download.log" 2>&1) || die "apt-get download failed, see $work/apt-download.log"
  for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$rootfs"; done
  mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/home/nonroot" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  chown 65532:65532 "$rootfs/home/nonroot"
  rm -rf "$rootfs/usr/share/doc" "$rootfs/usr/share/man" "$rootfs/usr/share/lintian"
  [ ! -e "$rootfs/bin/sh" ] && [ ! -e "$rootfs/usr/bin/sh" ] || die "the runtime stand-in must not have a shell"
  commit_dir "$rootfs" "$runtime_base" --user 65532:65532 --workingdir /home/nonroot \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  rm -rf "$rootfs" "$debs"
}

if ((rebuild_bases)) || ! has_image "$rust_base"; then build_rust_base; else log "reusing $rust_base"; fi
if ((rebuild_bases)) || ! has_image "$runtime_base"; then build_runtime_base; else log "reusing $runtime_base"; fi

log "buildah bud (the Dockerfile as it is, the bases by tag: the stand-ins)"
started=$SECONDS
bh bud --pull=never --isolation chroot --layers -f Dockerfile \
  --build-arg BUILDER_IMAGE="$rust_base" --build-arg RUNTIME_IMAGE="$runtime_base" \
  -t "$image" . >"$work/bud.log" 2>&1 || {
  tail -40 "$work/bud.log" >&2
  die "buildah bud failed, full log: $work/bud.log"
}
log "image built in $((SECONDS - started))s"

log "checking $image"
bh inspect --type image "$image" >"$work/inspect.json"
python3 - "$work/inspect.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))["OCIv1"]["config"]
assert c.get("User") == "65532:65532", f"user is {c.get('User')!r}"
assert c.get("Entrypoint") == ["/usr/local/bin/kmirror-operator"], c.get("Entrypoint")
assert {"8080/tcp", "9464/tcp"} <= set(c.get("ExposedPorts", {})), c.get("ExposedPorts")
EOF
ctr="$(bh from --pull=never "$image")"
cleanup() { bh rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
mnt="$(bh mount "$ctr")"
for bin in kmirror-operator kmirror-fetcher kmirror-verify; do
  [ -x "$mnt/usr/local/bin/$bin" ] || die "$bin missing from /usr/local/bin"
  needed="$(readelf -d "$mnt/usr/local/bin/$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')"
  for lib in $needed; do
    found="$(find "$mnt/lib" "$mnt/usr/lib" "$mnt/lib64" -name "$lib" 2>/dev/null | head -1)"
    [ -n "$found" ] || die "$bin needs $lib, which the runtime image lacks"
  done
  case " $needed " in *" libz.so.1 "*) die "$bin links libz dynamically (LIBZ_SYS_STATIC not honoured)" ;; esac
  version="$(bh run --isolation chroot --user 65532:65532 "$ctr" -- "/usr/local/bin/$bin" --version 2>&1)" ||
    die "$bin does not start in the image: $version"
  log "$bin: ${version} ($(du -h "$mnt/usr/local/bin/$bin" | cut -f1); needs: $needed)"
done
bh umount "$ctr" >/dev/null
bh rm "$ctr" >/dev/null
log "image size: $(bh images --noheading --format '{{.Size}}' "$image")"
if ((keep)); then log "kept $image in $store"; else bh rmi "$image" >/dev/null 2>&1 || true; fi
log "ok"
