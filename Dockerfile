# syntax=docker/dockerfile:1
#
# envoy-rls container image: a static binary on distroless, running as an
# unprivileged user with nothing else in the image (no shell, no package
# manager). Build it with
#
#   docker build --build-arg VERSION="$(git describe --tags --always)" -t envoy-rls .
#
# The rule files are mounted at /etc/envoy-rls/config (the default of
# --config-dir); the image ships examples/config there so that a bare
# `docker run` starts with something to serve.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so editing the sources does not invalidate this layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
# CGO_ENABLED=0 makes the binary static (distroless/static has no libc);
# -trimpath keeps build paths out of it, so builds are reproducible.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/envoy-rls ./cmd/envoy-rls

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/envoy-rls /usr/local/bin/envoy-rls
# Deployments of envoyproxy/ratelimit, Istio's sample among them, run
# command: ["/bin/ratelimit"] with no arguments: the same binary answers
# there and serves from that project's environment variables (see
# docs/migrating.md). A copy, not a symlink: the runtime image has no shell
# to make one, and a copy needs no assumption about how COPY treats links.
COPY --from=build /out/envoy-rls /bin/ratelimit
COPY examples/config/ /etc/envoy-rls/config/
# Numeric, so that Kubernetes' runAsNonRoot can verify it (65532 is the
# image's "nonroot" user).
USER 65532:65532
# 8081: gRPC (RateLimitService, health, reflection); 8080: HTTP (/healthz,
# /readyz, /healthcheck, /metrics, /json). The debug port (/debug/config,
# /debug/pprof) listens on 127.0.0.1:6070 and is deliberately not exposed.
EXPOSE 8081 8080
ENTRYPOINT ["/usr/local/bin/envoy-rls"]
CMD ["serve"]
