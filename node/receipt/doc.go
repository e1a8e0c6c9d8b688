// Package receipt is the mesh/1 record of a serve: the content-addressed
// ServeRequest, the MeshReceipt's signed core in canonical det-CBOR, its
// COSE_Sign1 seal under the steward's did:key, the sequence/prev hash chain
// over sealed envelopes, the output commitment with its per-receipt opening,
// and the replay verdicts a re-execution can reach (mesh-spec §3, §6).
//
// The package is pure data and cryptography: it meters nothing and runs no
// engine. Where the spec leaves an encoding open, the choice made here is
// stated next to the code that makes it and listed in conformance/v1/README.
package receipt
