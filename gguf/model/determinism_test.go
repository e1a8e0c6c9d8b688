package model_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/zeebo/blake3"
)

// pinnedLogits is the BLAKE3 of the logits of every step in
// TestLogitsArePinned. A serve is replayed from its receipt by running it
// again (mesh/1 §6.4), perhaps on another machine, so the engine's logits
// must be the same bits on every platform (amd64 and arm64, with or without
// the assembly kernels, -tags purego) and with any thread count. A change to
// the arithmetic of a kernel changes this digest; it breaks the replay of
// earlier receipts, and needs a deliberate new pin.
const pinnedLogits = "c4f62391398a466e9254f5f834e8952bb2d3103c773800c0ca5c1049f929708c"

// pinnedLaterLogits is the same for the families added after the first
// pin (each pinned group leaves the others' pins alone).
const pinnedLaterLogits = "4754420c8006dff2dbcf625684dddad9c0c9ba5ada65d9e3da8b8f9e3409c9fc"

// pinnedNewerLogits is the same for Gemma 2, Granite dense and MoE and
// SmolLM3, pinned after the others.
const pinnedNewerLogits = "b8b5d8e4d016651abe56aab0c3808330bfd9af205605ca927b8df44a5d3aa9c9"

// pinnedHybridLogits is the same for the hybrid families (Qwen3.5's delta
// nets, dense and MoE), pinned apart so that a change to their kernels
// leaves the other families' pin, and the replay of their receipts, alone.
const pinnedHybridLogits = "883372393dc412d7c750c1eedae970ddee48128aa86b75e7da7ee09c38bbdc3d"

// pinnedLFM2Logits is the same for LFM2's gated convolutions (their taps'
// fused multiply-adds, detmath.FMA32) and lfm2moe's sigmoid routing.
const pinnedLFM2Logits = "49b9a18c9bd4f70749a8d4e6acc2f06923e054d8ed5c6925ceaea4c7eaa93d1e"

func TestLogitsArePinned(t *testing.T) {
	md, err := vocabSource()
	if err != nil {
		t.Fatal(err)
	}
	type fixture struct{ arch, ft string }
	for _, pin := range []struct {
		name, want string
		fixtures   []fixture
	}{
		{"dense and MoE transformers", pinnedLogits, []fixture{
			{"llama", "Q4_0"}, {"qwen2", "Q4_K_M"}, {"phi3", "Q8_0"}, {"gemma3", "F16"}, {"llama", "Q6_K"}}},
		{"hybrid delta nets", pinnedHybridLogits, []fixture{{"qwen35", "Q8_0"}, {"qwen35moe", "Q4_K_M"}}},
		{"lfm2 and lfm2moe", pinnedLFM2Logits, []fixture{{"lfm2", "Q8_0"}, {"lfm2", "F16"}, {"lfm2moe", "Q4_K_M"}}},
		{"qwen3, gemma4, gpt-oss and qwen3moe", pinnedLaterLogits, []fixture{
			{"qwen3", "Q8_0"}, {"gemma4", "Q4_K_M"}, {"gpt-oss", "Q8_0"}, {"qwen3moe", "Q6_K"}}},
		{"gemma2, granite, granitemoe and smollm3", pinnedNewerLogits, []fixture{
			{"gemma2", "F16"}, {"granite", "Q4_0"}, {"granitemoe", "Q8_0"}, {"smollm3", "Q6_K"}}},
	} {
		all := blake3.New()
		for _, fx := range pin.fixtures {
			file, err := modeltest.Generate(modeltest.Fixture(fx.arch, fx.ft), md)
			if err != nil {
				t.Fatal(err)
			}
			var sums []string
			for _, threads := range []int{1, 3} {
				sums = append(sums, logitsDigest(t, file, threads))
			}
			if sums[0] != sums[1] {
				t.Fatalf("%s %s: 1 and 3 threads give different logits", fx.arch, fx.ft)
			}
			all.WriteString(sums[0])
		}
		if got := hex.EncodeToString(all.Sum(nil)); got != pin.want {
			t.Errorf("%s: logits digest %s, pinned %s: the forward pass's arithmetic changed, or differs on this platform", pin.name, got, pin.want)
		}
	}
}

// logitsDigest hashes the logits of a prompt (evaluated in batches of 5)
// and 6 decoding steps.
func logitsDigest(t *testing.T, file []byte, threads int) string {
	f, err := gguf.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New(cpu.Options{Threads: threads})
	defer be.Close()
	m, err := model.Load(f, be)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Context: 64, Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, logits, err := s.Prefill(ctx, parityPrompt)
	if err != nil {
		t.Fatal(err)
	}
	h := blake3.New()
	var b [4]byte
	for step := range 6 {
		for _, v := range logits {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			h.Write(b[:])
		}
		if logits, err = s.Eval(ctx, []uint32{(argmax(logits) + uint32(step)) % uint32(len(logits))}); err != nil {
			t.Fatal(err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
