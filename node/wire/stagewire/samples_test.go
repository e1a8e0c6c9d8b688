package stagewire

import "math"

func id(b byte) (out [32]byte) {
	for i := range out {
		out[i] = b + byte(i)
	}
	return out
}

func sampleLoadStage() *LoadStage {
	return &LoadStage{Stage: 7, Model: id(1), Lo: 4, Hi: 12, Context: 4096, Batch: 128, Seqs: 8,
		KV: KVF16, Out: DTypeF32, Next: id(40), NextStage: 8, Prev: id(60), Head: id(80)}
}

// sampleLoadStageRows is sampleLoadStage with output rows per step set
// apart from its sequences (FeatureLoadRows): the long form.
func sampleLoadStageRows() *LoadStage {
	l := sampleLoadStage()
	l.Rows = 9
	return l
}

func sampleReady() *Ready { return &Ready{Stage: 7, Lo: 4, Hi: 12, Memory: 3 << 30} }

func sampleInventory() *Inventory {
	return &Inventory{Stages: []StageInfo{
		{Stage: 7, Model: id(1), Lo: 4, Hi: 12, Context: 4096, KV: KVF16, Memory: 3 << 30},
		{Stage: 9, Model: id(2), Lo: 0, Hi: 2, Context: 512, KV: KVF32, Memory: 1 << 20},
	}}
}

func sampleTrim() *Trim { return &Trim{Stage: 7, Request: 42, Length: 17} }

func sampleTokens() *Activation {
	return &Activation{Stage: 7, DType: DTypeTokens, Seqs: []ActSeq{
		{Request: 42, Start: 0, Count: 3, Out: OutToken},
		{Request: 43, Start: 10, Count: 1, Out: OutLogits},
		{Request: 44, Start: 5, Count: 2, Out: OutNone},
	}, Tokens: []uint32{1, 2, 3, 4, 5, 6}}
}

func sampleF32() *Activation {
	a := &Activation{Stage: 8, DType: DTypeF32, Width: 4, Seqs: []ActSeq{
		{Request: 42, Start: 3, Count: 2, Out: OutToken},
		{Request: 43, Start: 0, Count: 1, Out: OutLogits},
	}}
	for i := range 12 {
		a.F32 = append(a.F32, float32(i)-5.5)
	}
	a.F32[3] = float32(math.Inf(-1))
	a.F32[4] = math.Float32frombits(0x7fc00001) // a NaN payload survives
	return a
}

func sampleF16() *Activation {
	return &Activation{Stage: 8, DType: DTypeF16, Width: 2, Seqs: []ActSeq{{Request: 1, Start: 0, Count: 2, Out: OutToken}},
		F16: []uint16{0x3c00, 0xbc00, 0x7bff, 0x0001}}
}

// sampleWindow is a step of two speculative windows and a plain decode:
// rows after each of the last 4 and 3 positions.
func sampleWindow() *Activation {
	return &Activation{Stage: 7, DType: DTypeTokens, Seqs: []ActSeq{
		{Request: 42, Start: 9, Count: 4, Out: OutToken, Rows: 4},
		{Request: 43, Start: 0, Count: 5, Out: OutLogits, Rows: 3},
		{Request: 44, Start: 5, Count: 1, Out: OutToken},
	}, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}
}

// sampleNextTokenWindow answers sampleWindow's token rows: request 42's
// four rows, then request 44's one.
func sampleNextTokenWindow() *NextToken {
	return &NextToken{Tokens: []TokenOut{{Request: 42, Pos: 10, Token: 5}, {Request: 42, Pos: 11, Token: 6},
		{Request: 42, Pos: 12, Token: 7}, {Request: 42, Pos: 13, Token: 8}, {Request: 44, Pos: 6, Token: 1}}}
}

func sampleNextToken() *NextToken {
	return &NextToken{Tokens: []TokenOut{{Request: 42, Pos: 5, Token: 1234}, {Request: 44, Pos: 7, Token: 0}}}
}

func sampleLogits() *Logits {
	return &Logits{Request: 43, Pos: 11, Values: []float32{-1, 0, 2.5, float32(math.Inf(1))}}
}

func sampleError() *Error {
	return &Error{Stage: 7, Request: 42, Code: CodePosition, Text: "start 5, request at 4"}
}

func sampleFinish() *Finish { return &Finish{Stage: 7, Request: 42, Serve: id(90)} }

func sampleReport() *Report {
	return &Report{Stage: 7, Request: 42, Envelope: []byte{0xd2, 0x84, 0x43, 0xa1, 0x01, 0x27, 0xa0}}
}

func samples() []Message {
	return []Message{sampleLoadStage(), sampleLoadStageRows(), sampleReady(), &Stop{Stage: 7}, &InventoryRequest{}, sampleInventory(),
		&Inventory{}, sampleTrim(), sampleTokens(), sampleF32(), sampleF16(), sampleWindow(), sampleNextToken(), sampleNextTokenWindow(), sampleLogits(),
		sampleError(), &Error{Code: CodeBusy}, sampleFinish(), sampleReport()}
}
