// Package steward serves mesh/1 requests (mesh-spec §2): it routes each
// request to the cheapest admissible backend (§4), authorises it, meters
// the engine's span (§3.3, §5), checks what the engine reports, and seals a
// hash-chained receipt (§6).
//
// One serve, in order:
//
//	route ─▶ authorise ─▶ meter opens ─▶ engine.Serve ─▶ meter closes
//	      ─▶ debit ─▶ checks (delivered fidelity, weights before = after)
//	      ─▶ seal ─▶ journal ─▶ advance the chain ─▶ hand the receipt out
//
// With a decision journal (Config.Durable, package journal) the steward
// is also the JCP enforcement point for the grants requests ride on
// ([WithPresentation], package grant): it journals each decision before
// the engine runs, each debit after, and each receipt before it is handed
// out, and a new steward replays the journal before it serves, so a crash
// at any instant gives no budget back and leaves the chain whole (§2.2).
// It keeps each backend's weights change record (§6.5, package change)
// in the same journal and serves a backend only on the weights in effect.
// Without one, the [Authorizer] and [Journal] hooks stand in.
package steward
