package control

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Controller is an owner's handle on one node: Client over
// mesh-llm-control/1, or HTTPClient over the node's loopback REST facade.
type Controller interface {
	GetConfig(ctx context.Context) (*nodev1.OwnerControlConfigSnapshot, error)
	// WatchConfig returns once the node accepted the watch. Its first
	// Next is the acceptance, or the snapshot when includeSnapshot; then
	// come updates.
	WatchConfig(ctx context.Context, includeSnapshot bool) (ConfigWatch, error)
	ApplyConfig(ctx context.Context, expectedRevision uint64, cfg *nodev1.NodeConfigSnapshot) (*nodev1.OwnerControlApplyConfigResponse, error)
	// RefreshInventory scans the node's models. An old node answers with
	// the snapshot only: Inventory is then nil.
	RefreshInventory(ctx context.Context) (*nodev1.OwnerControlRefreshInventoryResponse, error)
	// Lifecycle submits a load, unload, ensure or drain intent.
	Lifecycle(ctx context.Context, in Intent) (Ack, error)
	Close() error
}

// ConfigWatch is an accepted watch_config.
type ConfigWatch interface {
	// Next blocks for the next response; only ctx bounds it, and a Next
	// cut short by ctx ends the watch.
	Next(ctx context.Context) (*nodev1.OwnerControlWatchConfigResponse, error)
	Close() error
}

// transport carries requests for commands.
type transport interface {
	// call sends one unary request and returns its response, already
	// checked to answer req.
	call(ctx context.Context, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, error)
	watch(ctx context.Context, req *nodev1.OwnerControlRequest) (ConfigWatch, error)
	// address returns the ids requests carry.
	address() (requester, target []byte)
}

// commands builds typed requests over a transport; both clients embed it.
type commands struct {
	t   transport
	ids wire.RequestIDs
}

func (c *commands) request() *nodev1.OwnerControlRequest {
	return &nodev1.OwnerControlRequest{RequestId: c.ids.Next()}
}

func (c *commands) GetConfig(ctx context.Context) (*nodev1.OwnerControlConfigSnapshot, error) {
	req := c.request()
	from, to := c.t.address()
	req.GetConfig = &nodev1.OwnerControlGetConfigRequest{RequesterNodeId: from, TargetNodeId: to}
	resp, err := c.t.call(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetGetConfig().GetSnapshot(), nil
}

func (c *commands) WatchConfig(ctx context.Context, includeSnapshot bool) (ConfigWatch, error) {
	req := c.request()
	from, to := c.t.address()
	req.WatchConfig = &nodev1.OwnerControlWatchConfigRequest{RequesterNodeId: from, TargetNodeId: to, IncludeSnapshot: includeSnapshot}
	return c.t.watch(ctx, req)
}

func (c *commands) ApplyConfig(ctx context.Context, expected uint64, cfg *nodev1.NodeConfigSnapshot) (*nodev1.OwnerControlApplyConfigResponse, error) {
	req := c.request()
	from, to := c.t.address()
	req.ApplyConfig = &nodev1.OwnerControlApplyConfigRequest{RequesterNodeId: from, TargetNodeId: to, ExpectedRevision: expected, Config: cfg}
	resp, err := c.t.call(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetApplyConfig(), nil
}

func (c *commands) RefreshInventory(ctx context.Context) (*nodev1.OwnerControlRefreshInventoryResponse, error) {
	req := c.request()
	from, to := c.t.address()
	req.RefreshInventory = &nodev1.OwnerControlRefreshInventoryRequest{RequesterNodeId: from, TargetNodeId: to}
	resp, err := c.t.call(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.GetRefreshInventory(), nil
}

// ackResponse is every lifecycle response.
type ackResponse interface {
	GetIntentId() string
	GetAcceptedState() string
	GetTarget() *nodev1.OwnerControlModelRef
}

func (c *commands) Lifecycle(ctx context.Context, in Intent) (Ack, error) {
	req := c.request()
	from, to := c.t.address()
	var profile *string
	if in.Profile != "" {
		profile = proto.String(in.Profile)
	}
	switch in.Kind {
	case IntentLoad:
		req.LoadModel = &nodev1.OwnerControlLoadModelRequest{RequesterNodeId: from, TargetNodeId: to, Model: in.Model, Profile: profile}
	case IntentUnload:
		req.UnloadModel = &nodev1.OwnerControlUnloadModelRequest{RequesterNodeId: from, TargetNodeId: to, Model: in.Model}
	case IntentEnsure:
		req.EnsureModel = &nodev1.OwnerControlEnsureModelRequest{RequesterNodeId: from, TargetNodeId: to, Model: in.Model, Profile: profile}
	case IntentDrain:
		r := &nodev1.OwnerControlDrainModelRequest{RequesterNodeId: from, TargetNodeId: to, Model: in.Model}
		if in.DrainTimeout > 0 {
			r.DrainTimeoutSecs = proto.Uint64(uint64((in.DrainTimeout + 999_999_999) / 1e9))
		}
		req.DrainModel = r
	default:
		return Ack{}, fmt.Errorf("control: unknown intent kind %d", in.Kind)
	}
	resp, err := c.t.call(ctx, req)
	if err != nil {
		return Ack{}, err
	}
	var a ackResponse
	switch in.Kind {
	case IntentLoad:
		a = resp.GetLoadModel()
	case IntentUnload:
		a = resp.GetUnloadModel()
	case IntentEnsure:
		a = resp.GetEnsureModel()
	default:
		a = resp.GetDrainModel()
	}
	return Ack{IntentID: a.GetIntentId(), State: a.GetAcceptedState(), Target: a.GetTarget()}, nil
}

// checkAnswer holds a response envelope to answering req: an error
// becomes an *Error; a response must carry req's id and command.
func checkAnswer(env *nodev1.OwnerControlEnvelope, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, error) {
	if e := env.GetError(); e != nil {
		return nil, fromWire(e)
	}
	resp := env.GetResponse()
	switch {
	case resp == nil:
		return nil, fmt.Errorf("control: node answered with a handshake or request, not a response")
	case resp.GetRequestId() != req.GetRequestId():
		return nil, fmt.Errorf("control: response for request %d, want %d", resp.GetRequestId(), req.GetRequestId())
	case wire.ResponseCommand(resp) != wire.RequestCommand(req):
		return nil, fmt.Errorf("control: %v response to a %v request", wire.ResponseCommand(resp), wire.RequestCommand(req))
	}
	return resp, nil
}
