package node

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/identity"
	"github.com/meshnode/meshnode/node/mesh"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward"
)

// registry is the API's view of models: this node's, then those its
// peers host.
type registry struct{ n *Node }

func (r *registry) Local(name string) (api.Model, bool) {
	m, ok := r.served(name)
	return m, ok
}

// served is the local model name as the API serves it, with the node's
// generation defaults.
func (r *registry) served(name string) (*servedModel, bool) {
	in, ok := r.n.models.get(name)
	if !ok {
		return nil, false
	}
	return &servedModel{in: in, steward: r.n.steward, metrics: r.n.metrics, place: r.n.place, defaults: generationDefaults{
		maxTokens:      r.n.cfg.API.MaxTokens,
		fidelityFloor:  receipt.Fidelity(r.n.cfg.Steward.FidelityFloor),
		jouleCeilingUJ: r.n.cfg.Steward.JouleCeilingUJ,
	}, now: r.n.clock}, true
}

// NoModelHint implements api.NoModelHinter.
func (r *registry) NoModelHint() string { return r.n.noModelHint() }

func (r *registry) List() []api.ModelInfo {
	self := r.n.key.ID()
	var out []api.ModelInfo
	local := map[string]bool{}
	for _, name := range r.n.models.names() {
		out = append(out, api.ModelInfo{ID: name, Local: true, Owner: self})
		local[name] = true
	}
	remote := map[string][]identity.EndpointID{}
	for _, p := range r.n.mesh.Peers() {
		for _, name := range p.Models() {
			if !local[name] {
				remote[name] = append(remote[name], p.ID)
			}
		}
	}
	names := make([]string, 0, len(remote))
	for name := range remote {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		hosts := r.n.mesh.PeersHosting(name)
		info := api.ModelInfo{ID: name, Owner: remote[name][0]}
		for _, h := range hosts {
			info.Hosts = append(info.Hosts, h.ID)
		}
		if len(info.Hosts) > 0 {
			info.Owner = info.Hosts[0]
		}
		out = append(out, info)
	}
	return out
}

// meshRelay is the API's relay through the mesh.
type meshRelay struct {
	m *mesh.Node
	n *Node
}

func (r meshRelay) HostsOf(model string) []identity.EndpointID {
	peers := r.m.PeersHosting(model)
	ids := make([]identity.EndpointID, len(peers))
	for i, p := range peers {
		ids[i] = p.ID
	}
	return ids
}

func (r meshRelay) DialHTTP(ctx context.Context, peer identity.EndpointID) (net.Conn, error) {
	return r.m.DialHTTP(ctx, peer)
}

// apiNode answers the API's node and steward endpoints.
type apiNode struct{ n *Node }

func (a *apiNode) StewardDID() string { return a.n.steward.DID() }

// Receipts implements api.ReceiptExporter from the steward's receipt log.
func (a *apiNode) Receipts(from uint64, limit int) (api.ReceiptPage, error) {
	lines, first, next, err := a.n.receipts.page(from, limit)
	return api.ReceiptPage{Steward: a.n.steward.DID(), FirstSequence: first, NextSequence: next, Receipts: lines}, err
}
func (a *apiNode) Invite() string                 { return a.n.invite }
func (a *apiNode) Status(ctx context.Context) any { return a.n.Status() }

// Witness checks a receipt shown back to the steward (mesh/1 §2.2): 200
// when its journal holds it; 409 when it does not (the steward then
// refuses grants until an operator restores the journal).
func (a *apiNode) Witness(ctx context.Context, body []byte) (bool, error) {
	env, err := energyEnvelope(body, "witness body")
	if err != nil {
		return false, err
	}
	switch err := a.n.steward.Witness(env); {
	case err == nil:
		return true, nil
	case errors.Is(err, steward.ErrNotHeld):
		return false, nil
	case errors.Is(err, steward.ErrWitnessInvalid):
		return false, api.Errorf(http.StatusBadRequest, "invalid_request_error", "not_our_receipt",
			"the envelope is not a receipt this steward sealed: %v", err)
	default:
		return false, api.Errorf(http.StatusServiceUnavailable, "server_error", "witness_unavailable", "%v", err)
	}
}

// energySeed is the seed a usage.energy object carries (Energy.Seed), or
// nil if it has none.
func energySeed(energy []byte) (*uint64, error) {
	var e struct {
		Seed *uint64 `json:"seed"`
	}
	if err := json.Unmarshal(energy, &e); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"energy.seed must be the seed the answer's usage.energy carried, an unsigned 64-bit integer: %v", err)
	}
	return e.Seed, nil
}

// energyDraft is the draft a usage.energy object carries (Energy.Draft),
// and whether it carries one.
func energyDraft(energy []byte) (string, bool, error) {
	var e struct {
		Draft *string `json:"draft"`
	}
	if err := json.Unmarshal(energy, &e); err != nil {
		return "", false, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"energy.draft must be the draft the answer's usage.energy carried, a string: %v", err)
	}
	if e.Draft == nil {
		return "", false, nil
	}
	return *e.Draft, true, nil
}

// energyEnvelope reads the envelope out of a usage.energy object; what
// names the object in errors.
func energyEnvelope(energy []byte, what string) ([]byte, error) {
	var e struct {
		EnvelopeHex string `json:"envelope_hex"`
	}
	if err := json.Unmarshal(energy, &e); err != nil {
		return nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request",
			"%s must be the usage.energy object: {\"receipt\": ..., \"envelope_hex\": ...}: %v", what, err)
	}
	env, err := hex.DecodeString(strings.TrimSpace(e.EnvelopeHex))
	if err != nil || len(env) == 0 {
		return nil, api.Errorf(http.StatusBadRequest, "invalid_request_error", "invalid_request", "envelope_hex is missing or not hex")
	}
	return env, nil
}

// RecentReceipts implements api.ReceiptLister: the latest receipts of the
// steward's log, newest first, each opened under the node's key and
// linked to the one before it (the log's receipt before the page is read
// for the first link).
func (a *apiNode) RecentReceipts(limit int) (api.RecentReceipts, error) {
	_, first, next, err := a.n.receipts.page(0, 0)
	if err != nil {
		return api.RecentReceipts{}, err
	}
	out := api.RecentReceipts{Steward: a.n.steward.DID(), NextSequence: next}
	from := first
	if next-first > uint64(limit) {
		from = next - uint64(limit) - 1 // one more, for the first one's link
	}
	lines, _, _, err := a.n.receipts.page(from, limit+1)
	if err != nil {
		return out, err
	}
	pub := a.n.key.Public()
	var prev *receipt.Sealed // the receipt before the current one, if it opened
	for i, line := range lines {
		sum, s := summarize(line, pub)
		seq := sum.Sequence
		switch {
		case s == nil:
		case seq == 0:
			sum.Verified, sum.Verification = s.Receipt.Prev == nil, "signature ok; genesis"
			if s.Receipt.Prev != nil {
				sum.Verification = "genesis receipt has a prev"
			}
		case i > 0 && prev != nil:
			if err := (receipt.Head{Next: prev.Receipt.Sequence + 1, Last: prev.ID}).Check(s); err != nil {
				sum.Verification = "signature ok; " + err.Error()
			} else {
				sum.Verified, sum.Verification = true, "signature ok; links to receipt "+strconv.FormatUint(prev.Receipt.Sequence, 10)
			}
		case i > 0:
			sum.Verification = "signature ok; the receipt before it does not open, so its link is unchecked"
		default:
			// The first receipt the log still holds: the one it links to
			// was dropped with the log's older half.
			sum.Verified, sum.Verification = true, "signature ok; the receipt before it is no longer in the log"
		}
		prev = s
		if i == 0 && len(lines) > limit {
			continue // read for the next one's link only
		}
		out.Receipts = append(out.Receipts, sum)
	}
	slices.Reverse(out.Receipts)
	return out, nil
}

// summarize opens one receipt log line under pub; the sealed receipt is
// nil when it does not open, and the summary then says why.
func summarize(line json.RawMessage, pub ed25519.PublicKey) (api.ReceiptSummary, *receipt.Sealed) {
	var rl receiptLine
	if err := json.Unmarshal(line, &rl); err != nil {
		return api.ReceiptSummary{Verification: "unreadable log line: " + err.Error()}, nil
	}
	sum := api.ReceiptSummary{Sequence: rl.Sequence}
	env, err := hex.DecodeString(rl.EnvelopeHex)
	if err != nil {
		sum.Verification = "envelope_hex is not hex"
		return sum, nil
	}
	sum.ID = receipt.Sum(env).String()
	s, err := receipt.Open(env, pub)
	if err != nil {
		sum.Verification = err.Error()
		return sum, nil
	}
	r := &s.Receipt
	sum.RequestID, sum.Backend, sum.Recipe = r.RequestID.String(), r.Backend, r.Recipe
	sum.TokensIn, sum.TokensOut = r.TokensIn, r.TokensOut
	sum.EnergyUJ, sum.Provenance, sum.CutShort = r.Energy.UJ(), r.Energy.Provenance().String(), r.CutShort
	if uj, ok := r.UJPerAcceptedToken(); ok {
		sum.UJPerToken = &uj
	}
	if r.Sequence != rl.Sequence {
		sum.Verification = fmt.Sprintf("the log files receipt %d as %d", r.Sequence, rl.Sequence)
		return sum, nil
	}
	return sum, s
}
