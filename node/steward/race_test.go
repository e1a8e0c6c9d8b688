//go:build race

package steward

const raceEnabled = true
