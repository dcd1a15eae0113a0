# syntax=docker/dockerfile:1
#
# coastguardd image: a static binary on a distroless, non-root base.
#
#   docker build -t registry.example.com/coastguardd:v0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... --push .
#
# The image is not built in this repository's CI (no container engine there);
# `go build ./cmd/coastguardd` with CGO_ENABLED=0 is what CI does check.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module cache layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
# Stamped into the binary (coastguardd version, coastguard_build_info, gossip
# metadata): docker build --build-arg VERSION=$(git describe --tags) \
#   --build-arg REVISION=$(git rev-parse HEAD) .
ARG VERSION=dev
ARG REVISION=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X github.com/coastguard-mcnp/coastguard/internal/version.Version=${VERSION} -X github.com/coastguard-mcnp/coastguard/internal/version.Revision=${REVISION}" \
      -o /out/coastguardd ./cmd/coastguardd

# distroless/static: no shell, no package manager, CA certificates and
# /etc/passwd with the nonroot user (65532) only.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/coastguardd /usr/local/bin/coastguardd
USER 65532:65532
# gossip (TCP and UDP), metrics/health
EXPOSE 7946/tcp 7946/udp 9090/tcp
ENTRYPOINT ["/usr/local/bin/coastguardd"]
CMD ["run"]
