# Copyright The nri-sysctl Authors.
# SPDX-License-Identifier: Apache-2.0
# The nri-sysctl image: the static binary alone (no shell, no package
# manager), the same image `make image` builds offline. Run it as the
# Helm chart in config/helm/nri-sysctl does.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t nri-sysctl .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY pkg/ pkg/
COPY plugin/ plugin/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o /out/nri-sysctl ./plugin/cmd/nri-sysctl

FROM scratch
# The licence and the third-party notices, where make image puts them.
COPY LICENSE THIRD_PARTY_NOTICES /usr/share/doc/nri-sysctl/
COPY --from=build /out/nri-sysctl /nri-sysctl
# root: the NRI socket's directory is root's alone. The chart drops every
# capability but those the kernel check and the mode need (its README).
USER 0
ENTRYPOINT ["/nri-sysctl"]
