package membw

import (
	"context"
	"testing"
)

// TestMeasure: a small copy gives a positive, plausible figure (between
// 100 MB/s and 10 TB/s); a cancelled context and bad sizes are errors.
func TestMeasure(t *testing.T) {
	bw, err := Measure(context.Background(), 4<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	if bw < 1e8 || bw > 1e13 {
		t.Errorf("bandwidth %g B/s is implausible", bw)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, 1<<20, 1); err == nil {
		t.Error("a cancelled measure succeeded")
	}
	if _, err := Measure(context.Background(), 0, 1); err == nil {
		t.Error("size 0 measured")
	}
}
