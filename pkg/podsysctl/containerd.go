// Copyright The nri-sysctl Authors.
// SPDX-License-Identifier: Apache-2.0

package podsysctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	containersapi "github.com/containerd/containerd/api/services/containers/v1"
	sandboxapi "github.com/containerd/containerd/api/services/sandbox/v1"
	versionapi "github.com/containerd/containerd/api/services/version/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Extension names containerd's CRI plugin uses for its sandbox metadata.
const (
	sandboxStoreMetadataExt = "metadata"
	pauseContainerMetaExt   = "io.cri-containerd.sandbox.metadata"
	namespaceHeader         = "containerd-namespace"
)

// Containerd looks pods up through containerd's gRPC API.
type Containerd struct {
	conn       *grpc.ClientConn
	sandboxes  sandboxapi.StoreClient
	containers containersapi.ContainersClient
	namespace  string
	timeout    time.Duration
}

// NewContainerd connects lazily: the first lookup dials. Every connection
// is checked (TrustedDialer): a path only root can change, served by root,
// and by the process servedBy when it is not 0 (the containerd that
// started a pre-installed plugin).
func NewContainerd(address, namespace string, servedBy int) (*Containerd, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(TrustedDialer(address, servedBy)))
	if err != nil {
		return nil, fmt.Errorf("containerd client for %s: %w", address, err)
	}
	return &Containerd{
		conn:       conn,
		sandboxes:  sandboxapi.NewStoreClient(conn),
		containers: containersapi.NewContainersClient(conn),
		namespace:  namespace,
		timeout:    2 * time.Second,
	}, nil
}

// Check asks containerd for its version, to tell at start-up whether pods
// can be looked up at all: without it every pod would get nothing.
func (c *Containerd) Check(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	v, err := versionapi.NewVersionClient(c.conn).Version(ctx, &emptypb.Empty{})
	if err != nil {
		return "", err
	}
	return v.GetVersion(), nil
}

// Close closes the connection.
func (c *Containerd) Close() error { return c.conn.Close() }

// Fetch prefers the sandbox store's CRI metadata (the pod's own keys only),
// then the pause container's metadata, then a sandbox spec.
func (c *Containerd) Fetch(ctx context.Context, podID string) (PodSysctls, error) {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, namespaceHeader, c.namespace), c.timeout)
	defer cancel()

	var errs []error
	sb, err := c.sandboxes.Get(ctx, &sandboxapi.StoreGetRequest{SandboxID: podID})
	if err == nil {
		if ext := sb.GetSandbox().GetExtensions()[sandboxStoreMetadataExt]; ext != nil {
			r, err := fromCRIMetadata(ext.GetValue(), sb.GetSandbox().GetSpec().GetValue(), SourceSandboxConfig)
			if err == nil {
				return r, nil
			}
			errs = append(errs, fmt.Errorf("sandbox store: %w", err))
		}
	} else if !isNotFoundOrUnimplemented(err) {
		return PodSysctls{}, fmt.Errorf("sandbox store lookup of pod %s: %w", podID, err)
	} else {
		errs = append(errs, fmt.Errorf("sandbox store: %w", err))
	}

	ctr, err := c.containers.Get(ctx, &containersapi.GetContainerRequest{ID: podID})
	if err != nil {
		errs = append(errs, fmt.Errorf("pause container: %w", err))
		if spec := sb.GetSandbox().GetSpec(); spec != nil {
			if r, err := fromSpec(spec.GetValue()); err == nil {
				return r, nil
			}
		}
		return PodSysctls{}, fmt.Errorf("looking up pod %s: %w", podID, errors.Join(errs...))
	}
	spec := ctr.GetContainer().GetSpec().GetValue()
	if ext := ctr.GetContainer().GetExtensions()[pauseContainerMetaExt]; ext != nil {
		if r, err := fromCRIMetadata(ext.GetValue(), spec, SourceRuntimeConfig); err == nil {
			return r, nil
		}
	}
	if ctr.GetContainer().GetSpec() != nil {
		r, err := fromSpec(spec)
		if err == nil {
			return r, nil
		}
		errs = append(errs, err)
	}
	return PodSysctls{}, fmt.Errorf("looking up pod %s: no sysctl source: %w", podID, errors.Join(errs...))
}

// RuntimeAdded reads what the runtime added to the pod's sandbox spec
// beside own, the pod's own keys, from the pause container's spec: for
// containerd 2.0 to 2.2, whose sandbox store keeps no spec. Only
// convergence asks, for a pod it has never written, never the create
// path.
func (c *Containerd) RuntimeAdded(ctx context.Context, podID string, own map[string]string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, namespaceHeader, c.namespace), c.timeout)
	defer cancel()
	ctr, err := c.containers.Get(ctx, &containersapi.GetContainerRequest{ID: podID})
	if err != nil {
		return nil, fmt.Errorf("pause container of pod %s: %w", podID, err)
	}
	inSpec, _, err := readSpec(ctr.GetContainer().GetSpec().GetValue())
	if err != nil {
		return nil, fmt.Errorf("pause container of pod %s: %w", podID, err)
	}
	return addedByRuntime(inSpec, own), nil
}

func isNotFoundOrUnimplemented(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.Unimplemented:
		return true
	}
	return false
}
