package hw

import "context"

// WorkRecorder is told how much work a serve did, so that a meter whose
// spans overlap can split the machine's energy among the serves that
// shared it (see [WorkMeter]). Units are the engine's: the GGUF engine
// counts tokens evaluated × the model's weight bytes. Safe for concurrent
// use.
type WorkRecorder interface {
	AddWork(units uint64)
}

type workKey struct{}

// WithWork returns ctx carrying w, for the engine a serve runs on.
func WithWork(ctx context.Context, w WorkRecorder) context.Context {
	return context.WithValue(ctx, workKey{}, w)
}

// WorkFrom is the WorkRecorder ctx carries, or nil.
func WorkFrom(ctx context.Context) WorkRecorder {
	w, _ := ctx.Value(workKey{}).(WorkRecorder)
	return w
}
