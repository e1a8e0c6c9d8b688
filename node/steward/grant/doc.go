// Package grant is meshnode's JCP grant model as mesh/1 uses it (mesh-spec
// §2, §2.1, §2.3): signed, content-addressed grants that attenuate down a
// chain, presentations that spend a chain once for one request, and the
// ledger a steward decides and debits them in, in JCP's two phases.
//
// The package holds no I/O and no clock: a steward decides over a [Frame]
// that carries the decision time, so a decision replayed from the journal
// at its recorded time comes out as it did live. The format is meshnode's
// reading of JCP, which mesh-spec cites by section only; docs/grants.md
// lists every assumption.
package grant
