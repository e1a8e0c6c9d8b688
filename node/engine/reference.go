package engine

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/meshnode/meshnode/hw"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/zeebo/blake3"
)

// The reference engine's algorithm is fixed, so that the conformance
// vectors' output tokens can be recomputed by any implementation:
//
//	state  = BLAKE3-256("mesh-reference prefill\0" ‖ prompt as LE u32s)
//	token i: state = BLAKE3-256(state), ReferenceRounds times;
//	         token = LE u32 of state[0:4] mod ReferenceVocab
//
// A typed decision runs ReferenceRounds rounds per option scored and emits
// nothing. Every round is real hashing, so the metered span grows with the
// tokens served (§5).
const (
	ReferenceRecipe = "mesh-reference"
	ReferenceVocab  = 32000
	ReferenceRounds = 256
	referencePrefix = "mesh-reference prefill\x00"
)

// ReferenceConfig sets what a reference engine advertises. Neither field
// changes its output, which depends on the request and payload alone.
type ReferenceConfig struct {
	Fidelity          receipt.Fidelity
	UJPerToken        uint64
	UJPerOptionScored uint64
}

// Reference is mesh/1's reference engine (§5): deterministic, weights-free,
// greedy, doing real work proportional to the tokens it serves. It reports
// its advertised level as delivered, since it cannot degrade.
type Reference struct{ cfg ReferenceConfig }

// NewReference returns a reference engine advertising cfg.
func NewReference(cfg ReferenceConfig) *Reference { return &Reference{cfg: cfg} }

func (e *Reference) Recipe() string                   { return ReferenceRecipe }
func (e *Reference) Fidelity() receipt.Fidelity       { return e.cfg.Fidelity }
func (e *Reference) UJPerToken() uint64               { return e.cfg.UJPerToken }
func (e *Reference) UJPerOptionScored() uint64        { return e.cfg.UJPerOptionScored }
func (e *Reference) Deterministic() bool              { return true }
func (e *Reference) Weights() (receipt.Weights, bool) { return receipt.Weights{}, false }

// Devices implements [DeviceUser]: the reference engine hashes on the CPU.
func (e *Reference) Devices() hw.Domain { return hw.DomainCPU }

// Serve implements [Engine]. It decodes greedily from hashes, with no
// logits and no tokenizer, so it refuses sampling, penalties, logit
// biases, min_tokens, stop strings and grammars rather than ignore them.
func (e *Reference) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (Outcome, error) {
	if s := req.Sampling; s != nil && (s.TemperatureE6 > 0 || len(s.Stop) > 0 || s.MinIndent > 0 || s.Samplers != "") {
		return Outcome{}, fmt.Errorf("%w: the reference engine decodes greedily from hashes: no stop strings, indentation or sampler order", ErrRefused)
	}
	if s := req.Sampling; s.Penalised() || s.DRY() || s != nil && (len(s.LogitBias) > 0 || s.MinTokens > 0) {
		return Outcome{}, fmt.Errorf("%w: the reference engine has no logits, so no penalty (DRY's included), logit bias or min_tokens can change its picks", ErrRefused)
	}
	if s := req.Sampling; s != nil && s.Grammar != nil {
		return Outcome{}, fmt.Errorf("%w: the reference engine has no tokenizer, so it cannot hold output to a grammar", ErrRefused)
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	delivered := e.cfg.Fidelity
	out := Outcome{TokensIn: uint32(len(prompt)), Delivered: &delivered}
	state := referencePrefill(prompt)

	if d := req.Decision; d != nil {
		for range d.OptionsScored {
			if err := ctx.Err(); err != nil {
				return out, err
			}
			referenceRounds(&state)
		}
		return out, nil
	}
	if progress := PromptProgressFrom(ctx); progress != nil && req.MaxTokens > 0 {
		// The prompt is hashed in one go: all of it is in.
		progress(PromptProgress{Total: len(prompt), Processed: len(prompt)})
	}
	for range req.MaxTokens {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		referenceRounds(&state)
		tok := binary.LittleEndian.Uint32(state[:4]) % ReferenceVocab
		if err := emit(tok); err != nil {
			return out, fmt.Errorf("engine: emit: %w", err)
		}
		out.TokensOut++
		out.TokensAccepted++
	}
	return out, nil
}

func referencePrefill(prompt []uint32) [32]byte {
	h := blake3.New()
	h.WriteString(referencePrefix)
	var buf [4]byte
	for _, t := range prompt {
		binary.LittleEndian.PutUint32(buf[:], t)
		h.Write(buf[:])
	}
	var s [32]byte
	h.Sum(s[:0])
	return s
}

func referenceRounds(state *[32]byte) {
	for range ReferenceRounds {
		*state = blake3.Sum256(state[:])
	}
}
