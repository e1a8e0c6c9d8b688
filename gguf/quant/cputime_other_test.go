//go:build !linux

package quant_test

import "time"

var wallStart = time.Now()

// threadTime: wall time where the thread's CPU time is not read.
func threadTime() time.Duration { return time.Since(wallStart) }

// threadTimed says whether threadTime counts the thread's CPU time.
const threadTimed = false
