# The kmirror image: kmirror-operator, kmirror-fetcher and kmirror-verify on a distroless,
# non-root base. One image serves the operator Deployment and the fetcher pods it creates.
#
#   docker build -t ghcr.io/kmirror/kmirror:0.1.0 .                 # Docker >= 23 (BuildKit)
#   buildah bud --layers -t ghcr.io/kmirror/kmirror:0.1.0 .         # or podman build
#
# docs/image.md explains the choices, how to pin the bases by digest for a release, and how the
# build is checked without a registry.

# Must equal the channel in rust-toolchain.toml (a test checks it).
ARG RUST_VERSION=1.95.0
# The builder's Debian release: the runtime base's (debian12), so the glibc and libssl3 the
# binaries link against are the ones they run with. Named in BUILDER_IMAGE's tag.
ARG DEBIAN_RELEASE=bookworm

# The bases, pinned by digest: the tag says what a base is, the digest fixes its bytes. Both
# must name RUST_VERSION and DEBIAN_RELEASE's images (a test checks the tags); bump them with
# deploy/bump-base-digests.sh (docs/image.md, "Pinning the bases").
ARG BUILDER_IMAGE=docker.io/library/rust:1.95.0-slim-bookworm@sha256:d7482085ff5b415f84dba5647ae71606650bdef00db7aeb69f4b3d170c3e4082
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

FROM ${BUILDER_IMAGE} AS builder
ARG RUST_VERSION
# The Git commit the binaries report in kmirror_build_info{git_sha} (`make image` passes it).
ARG GIT_SHA=unknown
# librdkafka is compiled by rdkafka-sys with CMake: a C toolchain, cmake, pkg-config and the
# OpenSSL headers (the workspace enables rdkafka's "ssl" feature). zstd and libcurl (for
# OAUTHBEARER token requests) come from zstd-sys's and curl-sys's bundled sources;
# LIBZ_SYS_STATIC=1 makes libz-sys compile its bundled zlib too, so all are linked statically
# and the runtime needs only glibc, libgcc_s and libssl3/libcrypto3.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential cmake pkg-config libssl-dev \
 && rm -rf /var/lib/apt/lists/*
# RUSTUP_TOOLCHAIN selects the image's compiler and keeps rustup from downloading the
# components rust-toolchain.toml lists (rustfmt, clippy: not needed to build).
ENV RUSTUP_TOOLCHAIN=${RUST_VERSION} \
    KMIRROR_GIT_SHA=${GIT_SHA} \
    LIBZ_SYS_STATIC=1 \
    CARGO_TERM_COLOR=never
WORKDIR /src
COPY . .
# The cache mounts keep downloaded crates and compiled dependencies between builds; the
# binaries are copied out of the target cache because a cache mount is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
        --bin kmirror-operator --bin kmirror-fetcher --bin kmirror-verify \
 && mkdir -p /out \
 && cp target/release/kmirror-operator target/release/kmirror-fetcher target/release/kmirror-verify /out/

# glibc, libgcc_s, libssl3, CA certificates, tzdata and the user nonroot (65532); no shell.
FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.title="kmirror" \
      org.opencontainers.image.description="Kafka cluster mirroring as a Kubernetes operator" \
      org.opencontainers.image.source="https://github.com/kmirror/kmirror" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
COPY --from=builder /out/kmirror-operator /out/kmirror-fetcher /out/kmirror-verify /usr/local/bin/
# Numeric, so that the kubelet can check runAsNonRoot without a runAsUser.
USER 65532:65532
# Operator: /metrics /healthz /readyz on 8080; fetcher: the same on 9464.
EXPOSE 8080 9464
ENTRYPOINT ["/usr/local/bin/kmirror-operator"]
