// Package engine is the serving interface a backend implements (mesh-spec
// §5) and the reference engine used for conformance. An engine advertises
// a fidelity level and a modelled energy cost, serves a request on a prompt
// payload, streams its tokens and reports what it served; the steward
// meters around it. An engine never reports energy.
//
// The request an engine sees is the content-addressed receipt.ServeRequest
// itself, and the prompt payload beside it: an engine has no other input,
// so nothing outside the request's identity can change what it emits, and
// a deterministic engine's serve can be replayed from the request and the
// payload alone (§6.4).
package engine
