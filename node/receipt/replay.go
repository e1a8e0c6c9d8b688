package receipt

import "fmt"

// VerdictKind is the outcome of re-executing a serve against its receipt
// (§6.4).
type VerdictKind uint8

// The three verdicts. NotReplayable is the zero value: a replay that has
// not shown anything has shown nothing.
const (
	NotReplayable VerdictKind = iota
	Verified
	Diverged
)

func (k VerdictKind) String() string {
	switch k {
	case Verified:
		return "verified"
	case Diverged:
		return "diverged"
	case NotReplayable:
		return "not replayable"
	}
	return fmt.Sprintf("VerdictKind(%d)", uint8(k))
}

// Verdict is a replay's finding.
type Verdict struct {
	Kind VerdictKind
	// FirstDivergence is the index of the first token at which the
	// disclosed output and the re-run part (Diverged only). When one is a
	// prefix of the other it is the shorter one's length.
	FirstDivergence int
	// Reason says why a serve is NotReplayable.
	Reason string
	// Prefix is, for a receipt cut short (Receipt.CutShort), how many of
	// the re-run's tokens were held to the commitment: the serve handed
	// out that many and then stopped, as the receipt says, so only they
	// can be compared. Zero for a serve that ran to its own end.
	Prefix int
}

func (v Verdict) String() string {
	switch {
	case v.Kind == Verified && v.Prefix > 0:
		return fmt.Sprintf("verified (cut short: the serve's %d tokens are the re-run's first %d)", v.Prefix, v.Prefix)
	}
	switch v.Kind {
	case Diverged:
		return fmt.Sprintf("diverged at token %d", v.FirstDivergence)
	case NotReplayable:
		return "not replayable: " + v.Reason
	}
	return v.Kind.String()
}

// Replayer describes the engine a replay re-runs a serve on.
type Replayer struct {
	Backend, Recipe string
	// Weights are the engine's weights, nil if it names none.
	Weights *Weights
	// Deterministic is the engine's declaration (§5).
	Deterministic bool
}

// Replay is what a replaying party holds: the request, the prompt payload
// it re-runs on, the opening a disclosure gave it, and the disclosed
// output if it has one.
type Replay struct {
	Request ServeRequest
	Prompt  []uint32
	Opening Opening
	// Disclosed is an output disclosed for the receipt; nil if none.
	Disclosed []uint32
	On        Replayer
}

// Replay judges a re-execution of the serve r records. It decides first
// whether the serve can be re-run at all and calls run, which re-executes
// the request on in.Prompt and returns the tokens, only if it can. The
// verdicts are exactly §6.4's: Verified when the re-run opens the
// commitment; Diverged only when a disclosed output opens it on the
// replay's payload and opening (so the mismatch is the serve's), naming the
// first differing token; NotReplayable otherwise, for each reason the spec
// lists. A receipt cut short is judged by its prefix: Verified when its
// tokens are the first of the re-run's (Verdict.Prefix). An error is
// returned only when run fails.
func (r *Receipt) Replay(in Replay, run func() ([]uint32, error)) (Verdict, error) {
	not := func(format string, a ...any) (Verdict, error) {
		return Verdict{Kind: NotReplayable, Reason: fmt.Sprintf(format, a...)}, nil
	}
	switch {
	case !in.On.Deterministic:
		return not("the engine samples (it does not declare itself deterministic)")
	case in.Request.Sampling.Unseeded():
		return not("the request samples without a seed")
	case in.On.Backend != r.Backend || in.On.Recipe != r.Recipe:
		return not("the replay runs %s/%s, the receipt names %s/%s", in.On.Backend, in.On.Recipe, r.Backend, r.Recipe)
	case r.Weights != nil && (in.On.Weights == nil || *in.On.Weights != *r.Weights):
		return not("the replay does not run the weights the receipt sealed (%s, %s)", r.Weights.Digest, r.Weights.Precision)
	}
	id, err := in.Request.ID()
	if err != nil || id != r.RequestID {
		return not("the request is not the receipt's")
	}
	if r.OutputCommitment == nil {
		return not("the receipt commits to no output")
	}
	out, err := run()
	if err != nil {
		return Verdict{}, fmt.Errorf("receipt: replay: re-run: %w", err)
	}
	payload := PayloadDigest(in.Prompt)
	// A serve cut short handed out the first tokens_out tokens of what the
	// engine would have made and then stopped, for a reason the receipt
	// names (§6.4: a replay must not report a divergence it cannot pin on
	// the serve), so the re-run's tokens beyond those are not compared.
	cut := r.CutShort != "" && len(out) >= int(r.TokensOut)
	if cut {
		out = out[:r.TokensOut]
	}
	if Commit(in.Opening, id, payload, out) == *r.OutputCommitment {
		v := Verdict{Kind: Verified}
		if cut {
			v.Prefix = int(r.TokensOut)
		}
		return v, nil
	}
	if in.Disclosed != nil && Commit(in.Opening, id, payload, in.Disclosed) == *r.OutputCommitment {
		return Verdict{Kind: Diverged, FirstDivergence: firstDifference(in.Disclosed, out)}, nil
	}
	return not("the re-run does not open the commitment and no disclosed output opens it on this payload and opening; the mismatch may be the replay's own input")
}

func firstDifference(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
