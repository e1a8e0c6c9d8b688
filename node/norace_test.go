//go:build !race

package node

// raceEnabled: see race_test.go.
const raceEnabled = false
