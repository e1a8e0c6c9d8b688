//go:build race

package node

// raceEnabled: the race detector slows every step of this build several
// times over, so timing-priced decisions may differ from a plain build.
const raceEnabled = true
