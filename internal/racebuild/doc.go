// Package racebuild says whether this binary was built with the race
// detector (go test -race), for tests whose timing-priced behaviour or
// running time the detector changes: it slows every step several times
// over.
package racebuild
