package wire

import (
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/meshnode/meshnode/node/wire/nodev1"
)

// Owner control (ALPN mesh-llm-control/1) uses the same frames as the mesh,
// without a stream type byte: ReadFrame, DecodeOwnerControlEnvelope and
// WriteFrame serve both ends.

// Lengths fixed by the owner-control messages.
const (
	ownerKeyLen       = 32 // SignedNodeOwnership.owner_sign_public_key
	ownerSignatureLen = 64 // SignedNodeOwnership.signature, Ed25519
	configHashLen     = 32 // SHA-256 of the canonical config bytes
)

// OwnerCommand names an owned-node command by its field tag in
// OwnerControlRequest and OwnerControlResponse.
type OwnerCommand uint8

// The owned-node commands. A zero OwnerCommand means none, or more than
// one, was set.
const (
	CommandGetConfig        OwnerCommand = 2
	CommandWatchConfig      OwnerCommand = 3
	CommandApplyConfig      OwnerCommand = 4
	CommandRefreshInventory OwnerCommand = 5 // "scan-refresh" to operators
	CommandLoadModel        OwnerCommand = 6
	CommandUnloadModel      OwnerCommand = 7
	CommandEnsureModel      OwnerCommand = 8
	CommandDrainModel       OwnerCommand = 9
)

var commandNames = [...]string{
	CommandGetConfig:        "get_config",
	CommandWatchConfig:      "watch_config",
	CommandApplyConfig:      "apply_config",
	CommandRefreshInventory: "refresh_inventory",
	CommandLoadModel:        "load_model",
	CommandUnloadModel:      "unload_model",
	CommandEnsureModel:      "ensure_model",
	CommandDrainModel:       "drain_model",
}

// String returns the command's field name ("get_config").
func (c OwnerCommand) String() string {
	if c >= CommandGetConfig && c <= CommandDrainModel {
		return commandNames[c]
	}
	return fmt.Sprintf("OwnerCommand(%d)", uint8(c))
}

// RequestCommand returns the command r carries, or zero unless exactly one
// is set.
func RequestCommand(r *nodev1.OwnerControlRequest) OwnerCommand {
	if c, n := requestCommand(r); n == 1 {
		return c
	}
	return 0
}

// ResponseCommand returns the command r answers, or zero unless exactly one
// result is set.
func ResponseCommand(r *nodev1.OwnerControlResponse) OwnerCommand {
	if c, n := responseCommand(r); n == 1 {
		return c
	}
	return 0
}

func requestCommand(r *nodev1.OwnerControlRequest) (OwnerCommand, int) {
	return firstSet(r.GetGetConfig() != nil, r.GetWatchConfig() != nil, r.GetApplyConfig() != nil,
		r.GetRefreshInventory() != nil, r.GetLoadModel() != nil, r.GetUnloadModel() != nil,
		r.GetEnsureModel() != nil, r.GetDrainModel() != nil)
}

func responseCommand(r *nodev1.OwnerControlResponse) (OwnerCommand, int) {
	return firstSet(r.GetGetConfig() != nil, r.GetWatchConfig() != nil, r.GetApplyConfig() != nil,
		r.GetRefreshInventory() != nil, r.GetLoadModel() != nil, r.GetUnloadModel() != nil,
		r.GetEnsureModel() != nil, r.GetDrainModel() != nil)
}

// firstSet takes presence flags in tag order from CommandGetConfig and
// returns the first command present and how many are.
func firstSet(set ...bool) (first OwnerCommand, n int) {
	for i, s := range set {
		if s {
			if n == 0 {
				first = CommandGetConfig + OwnerCommand(i)
			}
			n++
		}
	}
	return first, n
}

// DecodeOwnerControlEnvelope decodes and validates one owner-control frame
// body (ValidateOwnerControlEnvelope). Authorising the owner and binding
// requester and target to the live connection is the control server's job.
func DecodeOwnerControlEnvelope(b []byte) (*nodev1.OwnerControlEnvelope, error) {
	return decode(b, new(nodev1.OwnerControlEnvelope), ValidateOwnerControlEnvelope)
}

// ValidateOwnerControlEnvelope checks an owner-control envelope: gen is
// ProtocolGeneration and exactly one of handshake, request, response and
// error is set. Then, for the one that is:
//   - handshake: an ownership with a non-blank owner_id, a 32-byte owner key
//     and node_endpoint_id, and a 64-byte signature;
//   - request: a non-zero request_id and exactly one command, whose
//     requester_node_id and target_node_id are 32 bytes; apply_config has a
//     config; load_model and ensure_model name a canonical_model_ref,
//     unload_model and drain_model that or an instance_id;
//   - response: a non-zero request_id and exactly one result; get_config
//     and refresh_inventory hold a valid snapshot (32-byte node_id and
//     config_hash, a config); watch_config exactly one of accepted,
//     snapshot and update; apply_config a 32-byte config_hash when it
//     succeeded or sent one; an inventory has an EXECUTED or COALESCED
//     disposition and entries strictly sorted by non-blank
//     canonical_model_ref;
//   - error: a known code other than UNSPECIFIED.
func ValidateOwnerControlEnvelope(e *nodev1.OwnerControlEnvelope) error {
	const msg = "OwnerControlEnvelope"
	if err := checkGen(msg, e.GetGen()); err != nil {
		return err
	}
	_, n := firstSet(e.GetHandshake() != nil, e.GetRequest() != nil, e.GetResponse() != nil, e.GetError() != nil)
	if n != 1 {
		return invalid(msg, "", "%d of handshake, request, response and error set, want exactly one", n)
	}
	var err error
	var field string
	switch {
	case e.GetHandshake() != nil:
		field, err = "handshake", validateHandshake(e.GetHandshake())
	case e.GetRequest() != nil:
		field, err = "request", validateRequest(e.GetRequest())
	case e.GetResponse() != nil:
		field, err = "response", validateResponse(e.GetResponse())
	default:
		field, err = "error", validateControlError(e.GetError())
	}
	if err != nil {
		return within(err, msg, field)
	}
	return nil
}

func validateHandshake(h *nodev1.OwnerControlHandshake) error {
	const msg = "OwnerControlHandshake"
	o := h.GetOwnership()
	switch {
	case o == nil:
		return invalid(msg, "ownership", "missing")
	case blank(o.GetOwnerId()):
		return invalid(msg, "ownership.owner_id", "empty")
	}
	if err := checkLen(msg, "ownership.owner_sign_public_key", o.GetOwnerSignPublicKey(), ownerKeyLen); err != nil {
		return err
	}
	if err := checkID(msg, "ownership.node_endpoint_id", o.GetNodeEndpointId()); err != nil {
		return err
	}
	return checkLen(msg, "ownership.signature", o.GetSignature(), ownerSignatureLen)
}

// addressed is every command request: all name their requester and target.
type addressed interface {
	proto.Message
	GetRequesterNodeId() []byte
	GetTargetNodeId() []byte
}

// modelCommand is every model lifecycle request.
type modelCommand interface {
	addressed
	GetModel() *nodev1.OwnerControlModelRef
}

func validateRequest(r *nodev1.OwnerControlRequest) error {
	const msg = "OwnerControlRequest"
	if r.GetRequestId() == 0 {
		return invalid(msg, "request_id", "zero")
	}
	c, n := requestCommand(r)
	if n != 1 {
		return invalid(msg, "", "%d commands set, want exactly one", n)
	}
	var err error
	switch c {
	case CommandGetConfig:
		err = checkAddressed(r.GetGetConfig())
	case CommandWatchConfig:
		err = checkAddressed(r.GetWatchConfig())
	case CommandApplyConfig:
		if err = checkAddressed(r.GetApplyConfig()); err == nil && r.GetApplyConfig().GetConfig() == nil {
			err = invalid(messageName(r.GetApplyConfig()), "config", "missing")
		}
	case CommandRefreshInventory:
		err = checkAddressed(r.GetRefreshInventory())
	case CommandLoadModel:
		err = checkModelCommand(r.GetLoadModel(), false)
	case CommandUnloadModel:
		err = checkModelCommand(r.GetUnloadModel(), true)
	case CommandEnsureModel:
		err = checkModelCommand(r.GetEnsureModel(), false)
	case CommandDrainModel:
		err = checkModelCommand(r.GetDrainModel(), true)
	}
	if err != nil {
		return within(err, msg, c.String())
	}
	return nil
}

func checkAddressed(a addressed) error {
	if err := checkID(messageName(a), "requester_node_id", a.GetRequesterNodeId()); err != nil {
		return err
	}
	return checkID(messageName(a), "target_node_id", a.GetTargetNodeId())
}

// checkModelCommand holds a lifecycle request to naming its model: by
// canonical reference, or, where instanceOK, by instance id.
func checkModelCommand(m modelCommand, instanceOK bool) error {
	if err := checkAddressed(m); err != nil {
		return err
	}
	ref := m.GetModel()
	switch {
	case ref == nil:
		return invalid(messageName(m), "model", "missing")
	case !blank(ref.GetCanonicalModelRef()), instanceOK && !blank(ref.GetInstanceId()):
		return nil
	case instanceOK:
		return invalid(messageName(m), "model", "names neither canonical_model_ref nor instance_id")
	}
	return invalid(messageName(m), "model.canonical_model_ref", "empty")
}

func validateResponse(r *nodev1.OwnerControlResponse) error {
	const msg = "OwnerControlResponse"
	if r.GetRequestId() == 0 {
		return invalid(msg, "request_id", "zero")
	}
	c, n := responseCommand(r)
	if n != 1 {
		return invalid(msg, "", "%d results set, want exactly one", n)
	}
	var err error
	switch c {
	case CommandGetConfig:
		err = checkConfigState("snapshot", r.GetGetConfig().GetSnapshot())
	case CommandWatchConfig:
		err = validateWatchResponse(r.GetWatchConfig())
	case CommandApplyConfig:
		a := r.GetApplyConfig()
		if a.GetSuccess() || len(a.GetConfigHash()) != 0 {
			err = checkLen(messageName(a), "config_hash", a.GetConfigHash(), configHashLen)
		}
	case CommandRefreshInventory:
		err = validateRefreshInventoryResponse(r.GetRefreshInventory())
	}
	// The lifecycle results (load, unload, ensure, drain) carry only
	// free-form state the protocol puts no rule on.
	if err != nil {
		return within(err, msg, c.String())
	}
	return nil
}

// configState is what OwnerControlConfigSnapshot and
// OwnerControlConfigUpdate share.
type configState interface {
	proto.Message
	GetNodeId() []byte
	GetConfigHash() []byte
	GetConfig() *nodev1.NodeConfigSnapshot
}

// checkConfigState checks a snapshot or update held in field; a nil one is
// missing.
func checkConfigState(field string, s configState) error {
	if !s.ProtoReflect().IsValid() { // a typed nil
		return invalid("", field, "missing")
	}
	var err error
	switch {
	case len(s.GetNodeId()) != EndpointIDLen:
		err = checkID("", "node_id", s.GetNodeId())
	case len(s.GetConfigHash()) != configHashLen:
		err = checkLen("", "config_hash", s.GetConfigHash(), configHashLen)
	case s.GetConfig() == nil:
		err = invalid("", "config", "missing")
	}
	if err != nil {
		return within(err, "", field)
	}
	return nil
}

func validateWatchResponse(w *nodev1.OwnerControlWatchConfigResponse) error {
	_, n := firstSet(w.GetAccepted() != nil, w.GetSnapshot() != nil, w.GetUpdate() != nil)
	if n != 1 {
		return invalid("", "", "%d of accepted, snapshot and update set, want exactly one", n)
	}
	switch {
	case w.GetAccepted() != nil:
		return checkID("", "accepted.target_node_id", w.GetAccepted().GetTargetNodeId())
	case w.GetSnapshot() != nil:
		return checkConfigState("snapshot", w.GetSnapshot())
	}
	return checkConfigState("update", w.GetUpdate())
}

func validateRefreshInventoryResponse(r *nodev1.OwnerControlRefreshInventoryResponse) error {
	if err := checkConfigState("snapshot", r.GetSnapshot()); err != nil {
		return err
	}
	inv := r.GetInventory()
	if inv == nil {
		return nil // an older server: snapshot only
	}
	switch inv.GetDisposition() {
	case nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_EXECUTED,
		nodev1.OwnerControlRefreshInventoryDisposition_OWNER_CONTROL_REFRESH_INVENTORY_DISPOSITION_COALESCED:
	default:
		return invalid("", "inventory.disposition", "%v, want EXECUTED or COALESCED", inv.GetDisposition())
	}
	prev := ""
	for i, e := range inv.GetEntries() {
		ref := strings.TrimSpace(e.GetCanonicalModelRef())
		switch {
		case ref == "":
			return invalid("", index("inventory.entries", i)+".canonical_model_ref", "empty")
		case i > 0 && ref <= prev:
			return invalid("", index("inventory.entries", i)+".canonical_model_ref",
				"%q does not sort after %q", ref, prev)
		}
		prev = ref
	}
	return nil
}

func validateControlError(e *nodev1.OwnerControlError) error {
	code := e.GetCode()
	if _, known := nodev1.OwnerControlErrorCode_name[int32(code)]; !known ||
		code == nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_UNSPECIFIED {
		return invalid("OwnerControlError", "code", "%d is not a known error code", int32(code))
	}
	return nil
}

// HandshakeEnvelope wraps the ownership attestation a client sends first on
// each owner-control stream.
func HandshakeEnvelope(own *nodev1.SignedNodeOwnership) *nodev1.OwnerControlEnvelope {
	return &nodev1.OwnerControlEnvelope{Gen: ProtocolGeneration,
		Handshake: &nodev1.OwnerControlHandshake{Ownership: own}}
}

// RequestEnvelope wraps a request.
func RequestEnvelope(req *nodev1.OwnerControlRequest) *nodev1.OwnerControlEnvelope {
	return &nodev1.OwnerControlEnvelope{Gen: ProtocolGeneration, Request: req}
}

// ErrorEnvelope wraps an error answer; requestID zero means the error
// answers no particular request (a bad handshake, say).
func ErrorEnvelope(code nodev1.OwnerControlErrorCode, message string, requestID uint64) *nodev1.OwnerControlEnvelope {
	e := &nodev1.OwnerControlError{Code: code, Message: message}
	if requestID != 0 {
		e.RequestId = &requestID
	}
	return &nodev1.OwnerControlEnvelope{Gen: ProtocolGeneration, Error: e}
}

// ResponseEnvelope wraps a response for the wire. One whose envelope would
// exceed MaxControlFrameBytes is replaced, as the protocol requires, by a
// CONTROL_UNAVAILABLE error for the same request id; replaced reports it.
func ResponseEnvelope(resp *nodev1.OwnerControlResponse) (env *nodev1.OwnerControlEnvelope, replaced bool) {
	env = &nodev1.OwnerControlEnvelope{Gen: ProtocolGeneration, Response: resp}
	if size := proto.Size(env); size > MaxControlFrameBytes {
		return ErrorEnvelope(nodev1.OwnerControlErrorCode_OWNER_CONTROL_ERROR_CODE_CONTROL_UNAVAILABLE,
			fmt.Sprintf("response of %d bytes exceeds the %d-byte control frame limit", size, MaxControlFrameBytes),
			resp.GetRequestId()), true
	}
	return env, false
}

// RequestIDs hands out owner-control request ids, which are never zero,
// even after the counter wraps. The zero value is ready to use and safe
// for concurrent use.
type RequestIDs struct {
	last atomic.Uint64
}

// Next returns the next request id.
func (ids *RequestIDs) Next() uint64 {
	for {
		if id := ids.last.Add(1); id != 0 {
			return id
		}
	}
}
