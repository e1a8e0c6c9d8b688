package control

import (
	"context"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire"
	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// decodeRequest decodes a request envelope. A request for a command this
// node does not know is UNKNOWN_COMMAND; anything else malformed is
// BAD_REQUEST.
func decodeRequest(b []byte) (*nodev1.OwnerControlRequest, *Error) {
	env, err := wire.DecodeOwnerControlEnvelope(b)
	if err != nil {
		id, unknown := unknownCommand(b)
		if unknown {
			return nil, &Error{Code: ErrUnknownCommand.Code, RequestID: id, Message: "this node does not implement the command"}
		}
		return nil, &Error{Code: ErrBadRequest.Code, RequestID: id, Message: err.Error()}
	}
	if env.GetRequest() == nil {
		return nil, errorf(ErrBadRequest.Code, "expected a request envelope")
	}
	return env.GetRequest(), nil
}

// The command field numbers this node knows.
const (
	firstCommand = protowire.Number(wire.CommandGetConfig)
	lastCommand  = protowire.Number(wire.CommandDrainModel)
)

// unknownCommand walks an envelope that failed to decode, without
// allocating, and reports its request id and whether it is a well-formed
// request whose only command is one this node does not know: a newer
// client's.
func unknownCommand(b []byte) (requestID uint64, unknown bool) {
	req, ok := field(b, 3) // OwnerControlEnvelope.request
	if !ok {
		return 0, false
	}
	known, other := false, false
	for len(req) > 0 {
		num, typ, n := protowire.ConsumeTag(req)
		if n < 0 {
			return requestID, false
		}
		m := protowire.ConsumeFieldValue(num, typ, req[n:])
		if m < 0 {
			return requestID, false
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			requestID, _ = protowire.ConsumeVarint(req[n:])
		case num >= firstCommand && num <= lastCommand:
			known = true
		case num > lastCommand && typ == protowire.BytesType:
			other = true
		}
		req = req[n+m:]
	}
	return requestID, requestID != 0 && !known && other
}

// field returns the last value of length-delimited field num in b.
func field(b []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	for len(b) > 0 {
		n2, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(n2, typ, b[n:])
		if m < 0 {
			return nil, false
		}
		if n2 == num && typ == protowire.BytesType {
			out, _ = protowire.ConsumeBytes(b[n:])
			found = true
		}
		b = b[n+m:]
	}
	return out, found
}

// commandOf returns the command message a valid request carries.
func commandOf(req *nodev1.OwnerControlRequest) proto.Message {
	return commandField(req.ProtoReflect(), wire.RequestCommand(req)).Message().Interface()
}

// execute runs one authorised unary command.
func (s *Server) execute(ctx context.Context, req *nodev1.OwnerControlRequest) (*nodev1.OwnerControlResponse, *Error) {
	resp := &nodev1.OwnerControlResponse{RequestId: req.GetRequestId()}
	var err error
	switch wire.RequestCommand(req) {
	case wire.CommandGetConfig:
		var st configState
		if st, err = s.state(); err == nil {
			resp.GetConfig = &nodev1.OwnerControlGetConfigResponse{Snapshot: s.snapshot(st)}
		}
	case wire.CommandApplyConfig:
		resp.ApplyConfig, err = s.applyConfig(ctx, req.GetApplyConfig())
	case wire.CommandRefreshInventory:
		resp.RefreshInventory, err = s.refreshInventory(ctx)
	case wire.CommandLoadModel:
		r := req.GetLoadModel()
		var a Ack
		if a, err = s.submit(ctx, Intent{Kind: IntentLoad, Model: r.GetModel(), Profile: r.GetProfile()}); err == nil {
			resp.LoadModel = &nodev1.OwnerControlLoadModelResponse{IntentId: a.IntentID, AcceptedState: a.State, Target: a.Target}
		}
	case wire.CommandUnloadModel:
		var a Ack
		if a, err = s.submit(ctx, Intent{Kind: IntentUnload, Model: req.GetUnloadModel().GetModel()}); err == nil {
			resp.UnloadModel = &nodev1.OwnerControlUnloadModelResponse{IntentId: a.IntentID, AcceptedState: a.State, Target: a.Target}
		}
	case wire.CommandEnsureModel:
		r := req.GetEnsureModel()
		var a Ack
		if a, err = s.submit(ctx, Intent{Kind: IntentEnsure, Model: r.GetModel(), Profile: r.GetProfile()}); err == nil {
			resp.EnsureModel = &nodev1.OwnerControlEnsureModelResponse{IntentId: a.IntentID, AcceptedState: a.State, Target: a.Target}
		}
	case wire.CommandDrainModel:
		r := req.GetDrainModel()
		in := Intent{Kind: IntentDrain, Model: r.GetModel()}
		if r.DrainTimeoutSecs != nil {
			in.DrainTimeout = time.Duration(min(r.GetDrainTimeoutSecs(), maxDrainSecs)) * time.Second
		}
		var a Ack
		if a, err = s.submit(ctx, in); err == nil {
			resp.DrainModel = &nodev1.OwnerControlDrainModelResponse{IntentId: a.IntentID, AcceptedState: a.State, Target: a.Target}
		}
	default:
		err = errorf(ErrUnknownCommand.Code, "no executor for %v", wire.RequestCommand(req))
	}
	if err != nil {
		e := *asError(err)
		e.RequestID = req.GetRequestId()
		return nil, &e
	}
	return resp, nil
}

// maxDrainSecs keeps a requested drain deadline representable; the
// Reconciler caps it far lower.
const maxDrainSecs = 1 << 32

func (s *Server) applyConfig(ctx context.Context, r *nodev1.OwnerControlApplyConfigRequest) (*nodev1.OwnerControlApplyConfigResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Command)
	defer cancel()
	res, err := s.cfg.Store.Apply(ctx, r.GetExpectedRevision(), r.GetConfig())
	if err != nil {
		return nil, err
	}
	st, err := s.state()
	if err != nil {
		return nil, err
	}
	if res.Applied {
		s.hub.publish(st)
	}
	out := &nodev1.OwnerControlApplyConfigResponse{
		Success:         res.Applied,
		CurrentRevision: st.revision,
		ConfigHash:      st.hash[:],
		ApplyMode:       res.Mode,
		Diagnostics:     res.Diagnostics,
	}
	if res.Error != "" {
		out.Error = &res.Error
	}
	if res.Applied && hasUnknown(r.GetConfig().ProtoReflect()) {
		out.Diagnostics = append(out.Diagnostics, &nodev1.ConfigDiagnostic{
			Code:     nodev1.ConfigDiagnosticCode_CONFIG_DIAGNOSTIC_CODE_UNKNOWN_FIELD,
			Severity: nodev1.ConfigDiagnosticSeverity_CONFIG_DIAGNOSTIC_SEVERITY_WARNING,
			Source:   nodev1.ConfigDiagnosticSource_CONFIG_DIAGNOSTIC_SOURCE_COMPATIBILITY,
			Message:  "the configuration has fields this node does not know; they are stored but have no effect",
		})
	}
	return out, nil
}

func (s *Server) refreshInventory(ctx context.Context) (*nodev1.OwnerControlRefreshInventoryResponse, error) {
	if s.inv == nil {
		return nil, errorf(ErrUnavailable.Code, "this node does not scan its models")
	}
	entries, disposition, err := s.inv.refresh(ctx)
	if err != nil {
		return nil, errorf(ErrUnavailable.Code, "inventory scan failed: %v", err)
	}
	st, err := s.state()
	if err != nil {
		return nil, err
	}
	return &nodev1.OwnerControlRefreshInventoryResponse{
		Snapshot:  s.snapshot(st), // the legacy result, which old clients read
		Inventory: &nodev1.OwnerControlRefreshInventory{Entries: entries, Disposition: disposition},
	}, nil
}

func (s *Server) submit(ctx context.Context, in Intent) (Ack, error) {
	if s.cfg.Lifecycle == nil {
		return Ack{}, errorf(ErrUnavailable.Code, "this node does not manage model lifecycles")
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeouts.Command)
	defer cancel()
	return s.cfg.Lifecycle.Submit(ctx, in)
}
