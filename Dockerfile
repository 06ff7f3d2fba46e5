# syntax=docker/dockerfile:1
#
# The Joiner controller image: a static (musl) `joiner` binary with the live controller
# (`--features controller`) on distroless/static, running as a non-root user.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/joiner:<tag> --push .
#
# musl rather than glibc: the binary is static, so it needs no libc from the image, and
# distroless/static (CA certificates, tzdata, a nonroot user, nothing else) is enough.
# aws-lc-rs (the TLS provider of kube and the AWS SDK) builds its C code for musl with musl-gcc.
# musl's allocator is slower than glibc's under many threads; the controller is one step loop
# with a small tokio pool, so that is not expected to matter.
# Each platform builds natively (arm64 under emulation when cross-building with buildx), which
# avoids a cross C toolchain for aws-lc.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    target="$(uname -m)-unknown-linux-musl"; \
    rustup target add "${target}"; \
    export CC_x86_64_unknown_linux_musl=musl-gcc CC_aarch64_unknown_linux_musl=musl-gcc; \
    cargo build --release --locked -p joiner --features controller --target "${target}"; \
    mkdir -p /out; \
    cp "target/${target}/release/joiner" /out/joiner; \
    /out/joiner --help >/dev/null

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="joiner" \
      org.opencontainers.image.description="Joiner, a Kubernetes node autoscaler for GPU clusters" \
      org.opencontainers.image.source="https://github.com/joiner-dev/joiner" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/joiner /usr/local/bin/joiner
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/joiner"]
CMD ["--help"]
