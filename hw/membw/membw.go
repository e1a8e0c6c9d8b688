// Package membw measures the memory bandwidth this process sees: a short
// copy between two buffers larger than any last-level cache, so that the
// figure is main memory's, not a cache's.
//
// It is what a CPU stage of a split model is bound by in decode (every
// token streams the stage's weights through the cores once), which is why
// the split planner ranks peers by it. It measures a copy by the Go
// runtime on one core: a lower bound of what the machine gives many
// cores, comparable between nodes that measure it the same way, and not
// the chip's nominal peak.
package membw

import (
	"context"
	"errors"
	"time"
)

// DefaultSize is the buffer size: larger than the last-level caches of
// the edge boxes meshnode runs on (a few MiB to 32 MiB); on a server part
// with more cache than that the figure is partly the cache's. A copy
// takes a few ms at 10–50 GB/s.
const DefaultSize = 64 << 20

// DefaultRounds is how many copies Measure times; it keeps the fastest.
const DefaultRounds = 4

// ErrTooShort is returned when no copy took a measurable time.
var ErrTooShort = errors.New("membw: copy too fast to time")

// Measure copies a size-byte buffer rounds times and returns the fastest
// round's bandwidth in bytes/s, counting the bytes read and the bytes
// written (2·size per copy), as STREAM's copy kernel does. The buffers are
// touched first, so page faults are not timed. It stops early, with
// ctx's error, when ctx ends.
func Measure(ctx context.Context, size, rounds int) (float64, error) {
	if size <= 0 || rounds <= 0 {
		return 0, errors.New("membw: size and rounds must be positive")
	}
	src, dst := make([]byte, size), make([]byte, size)
	for i := 0; i < size; i += 4096 {
		src[i], dst[i] = byte(i), 1
	}
	var best time.Duration
	for r := 0; r < rounds; r++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		start := time.Now()
		copy(dst, src)
		if d := time.Since(start); d > 0 && (best == 0 || d < best) {
			best = d
		}
	}
	if best == 0 {
		return 0, ErrTooShort
	}
	return float64(2*size) / best.Seconds(), nil
}
