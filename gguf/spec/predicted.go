package spec

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Predicted proposes from a predicted output (OpenAI's predicted
// outputs): tokens the answer is expected to repeat in large part, such
// as a file being edited. While the answer so far is the prediction's
// start, it drafts the prediction's next tokens; once the answer strays
// (an edited line), it drafts what follows the prediction's best match
// of the answer's last tokens, found as Lookup finds one in the sequence
// (MinN to MaxN tokens, the match reaching furthest back), so the
// unchanged text after an edit is picked up again. Proposals are
// deterministic (Draft.Q nil). One serves one request: it remembers how
// much of the answer it has seen to follow the prediction.
type Predicted struct {
	Tokens     []uint32
	MinN, MaxN int // the n-gram lengths tried once the answer strays; 0: 1 and 3

	// aligned is how many of the answer's first tokens are known to be
	// the prediction's (a prefix of it); -1 once the answer strays.
	aligned int
}

// NewPredicted is a proposer of the predicted tokens.
func NewPredicted(tokens []uint32) *Predicted { return &Predicted{Tokens: tokens} }

// Propose implements Proposer.
func (p *Predicted) Propose(ctx context.Context, seq []uint32, gen, k int) ([]Draft, error) {
	return p.ProposeJudged(ctx, seq, gen, k, nil)
}

// ProposeJudged implements Judged: a draft along the prediction's start
// is counted in the band of text being copied; one after a match, in
// the band Lookup counts that match in (lookupConf).
func (p *Predicted) ProposeJudged(_ context.Context, seq []uint32, gen, k int, judge func(conf float64) (take, more bool)) ([]Draft, error) {
	if k <= 0 || len(p.Tokens) == 0 {
		return nil, nil
	}
	out := seq[min(max(gen, 0), len(seq)):] // the answer so far
	if p.following(out) {
		next := p.Tokens[len(out):min(len(out)+k, len(p.Tokens))]
		return judged(next, func(j int) float64 { return lookupConf(1, lookupCopying, j) }, judge), nil
	}
	return Lookup{MinN: p.MinN, MaxN: p.MaxN}.draftFrom(p.Tokens, seq, k, judge), nil
}

// following reports whether the answer out is still the prediction's
// start, with a token of the prediction after it; it checks only the
// tokens it has not seen before.
func (p *Predicted) following(out []uint32) bool {
	switch {
	case p.aligned < 0:
		return false
	case len(out) < p.aligned:
		// A shorter answer than before: its tokens were seen, as the
		// answer only grows; recount from its length.
		p.aligned = len(out)
	case len(out) > len(p.Tokens) || !slices.Equal(out[p.aligned:], p.Tokens[p.aligned:len(out)]):
		p.aligned = -1
		return false
	default:
		p.aligned = len(out)
	}
	return p.aligned < len(p.Tokens)
}

// predictionPrefix begins a prediction's id.
const predictionPrefix = "predicted:"

// PredictionID is what a sampled request given the predicted tokens
// names as its draft (receipt.Sampling.Draft, with its prices and bounds:
// PricedDraft, LimitedDraft): "predicted:" and the SHA-256 of the tokens
// (each little-endian uint32), in hex. A sampled answer's tokens depend
// on the drafts its rounds verified, so its request must name them, and
// a replay must be given the same prediction.
func PredictionID(tokens []uint32) string {
	h := sha256.New()
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	return predictionPrefix + hex.EncodeToString(h.Sum(nil))
}

// IsPredictionID reports whether a draft name's id (SplitDraft's)
// names a prediction.
func IsPredictionID(id string) bool { return strings.HasPrefix(id, predictionPrefix) }

// PredictionPrices are the prices a sampled request given a prediction
// names (PricedDraft) on a model whose proposer's prices are p (measured,
// or none: the files'): its drafts cost nothing to find, and its rows
// are priced as measured for sampling, else at DefaultRowCost.
func PredictionPrices(p Prices, measured bool) DraftPrices {
	if measured {
		return DraftPrices{Row: max(p.SampledRow, minRowCost)}
	}
	return DraftPrices{Row: DefaultRowCost}
}

// PredictionRounds is the proposer and window of a serve given the
// predicted tokens, on a model whose proposer is d (nil: none): a greedy
// serve's window is PredictionWindow, a sampled one's
// SampledPredictionWindow for the draft its request names.
func (d *Drafter) PredictionRounds(tokens []uint32, greedy bool, draft string) (*Predicted, *Window, error) {
	if greedy {
		return NewPredicted(tokens), d.PredictionWindow(), nil
	}
	w, err := d.SampledPredictionWindow(draft, tokens)
	if err != nil {
		return nil, nil, err
	}
	return NewPredicted(tokens), w, nil
}

// SampledPredictionWindow is the window of a sampled serve given the
// predicted tokens whose request names draft, on a model whose proposer
// is d (nil: none): the name's id must be the tokens' (PredictionID),
// and its prices price the rounds (none: those of the files,
// DefaultRowCost), of at most d's most drafts, expecting CopyPrior as
// PredictionWindow does.
func (d *Drafter) SampledPredictionWindow(draft string, tokens []uint32) (*Window, error) {
	id, p, priced, err := SplitDraft(draft)
	if err == nil {
		err = CheckPredictionNamed(id, tokens)
	}
	switch {
	case err != nil:
		return nil, err
	case !priced:
		return NewWindow(d.Max(), 0, 0).Expect(CopyPrior), nil
	}
	return sampledWindow(d.Max(), p).Expect(CopyPrior), nil
}

// CheckPredictionNamed is an error where a sampled request's draft name
// (its id, SplitDraft's) does not name the prediction it is given (its
// tokens depend on the drafts, so its identity must name them), or
// names one it is not given.
func CheckPredictionNamed(id string, prediction []uint32) error {
	switch {
	case len(prediction) > 0 && id != PredictionID(prediction):
		return fmt.Errorf("spec: a sampled request given a prediction must name it as its draft (%s), not %q", PredictionID(prediction), id)
	case len(prediction) == 0 && IsPredictionID(id):
		return fmt.Errorf("spec: the request names a prediction (%s) as its draft, and none was given", id)
	}
	return nil
}
