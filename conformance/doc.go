// Package conformance holds meshnode to the mesh/1 specification
// (shared/spec/mesh-spec.md §7): the deterministic reference serve that the
// published vectors in v1/ pin, the generator that writes them, and the
// suite that maps each §7 item to the tests that prove it.
//
// Regenerate the vectors with:
//
//	go run ./conformance/cmd/gen-vectors conformance/v1
package conformance
