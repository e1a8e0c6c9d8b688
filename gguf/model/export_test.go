package model

// Shadowed reports whether m's greedy tokens may come from a shadow.
func (m *Model) Shadowed() bool { return m.greedy != nil }

// ShadowStats is what the shadow of s's own scratch did: the rows it
// dotted exactly, the tokens it settled and those it left.
func (s *Session) ShadowStats() (cands, tokens, unsettled int) {
	if s.sc == nil || s.sc.greedy == nil {
		return 0, 0, 0
	}
	g := &s.sc.greedy.s
	return g.Candidates, g.Tokens, g.Unsettled
}

// DropShadow leaves m without its head's shadow, for as long as the
// tests need a model without one.
func (m *Model) DropShadow() { m.greedy, m.headData = nil, nil }

// DropJoint has m make one product a weight even on a backend with
// joint products (backend.Joint), for benchmarks to compare.
func (m *Model) DropJoint() { m.jm = nil }
