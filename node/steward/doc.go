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
// Grants and the durable journal are hooks here ([Authorizer], [Journal]):
// the JCP gate and the file journal plug into them.
package steward
