# syntax=docker/dockerfile:1.7
# warmpath images: a Rust builder stage, then one small non-root runtime image per binary.
#
#   docker build --target warmpath-router     --build-arg BINARIES=warmpath-router     -t warmpath-router:dev .
#   docker build --target warmpath-controller --build-arg BINARIES=warmpath-controller -t warmpath-controller:dev .
#   docker build --target warmpath-sim        --build-arg BINARIES=warmpath-sim        -t warmpath-sim:dev .
#
# BINARIES lists the workspace binaries the builder compiles (space-separated); each runtime
# target copies one of them, so build a target with its binary in BINARIES. The default builds
# both the chart needs.
# The images run as uid/gid 65532 (distroless "nonroot") with nothing but the binary and libc.

ARG RUST_VERSION=1.95
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS builder
ARG BINARIES="warmpath-router warmpath-controller"
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target folder between builds; the binaries are copied out
# of the cached target folder in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eux; \
    mkdir -p /out; \
    for bin in ${BINARIES}; do \
      cargo build --release --locked --bin "$bin"; \
      cp "target/release/$bin" /out/; \
    done

FROM ${RUNTIME_IMAGE} AS warmpath-router
COPY --from=builder /out/warmpath-router /usr/local/bin/warmpath-router
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/warmpath-router"]

FROM ${RUNTIME_IMAGE} AS warmpath-sim
COPY --from=builder /out/warmpath-sim /usr/local/bin/warmpath-sim
USER 65532:65532
EXPOSE 8001
ENTRYPOINT ["/usr/local/bin/warmpath-sim"]

FROM ${RUNTIME_IMAGE} AS warmpath-controller
COPY --from=builder /out/warmpath-controller /usr/local/bin/warmpath-controller
USER 65532:65532
EXPOSE 9091
ENTRYPOINT ["/usr/local/bin/warmpath-controller"]
