package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// benchText is about 10 KB of the vector inputs (English, code, numbers,
// whitespace runs, CJK, Cyrillic, Khmer, emoji), repeated.
func benchText(b *testing.B, name string) string {
	_, inp, _ := loadVocab(b, name)
	one := strings.ReplaceAll(string(inp), "\n__ggml_vocab_test__\n", "\n")
	return strings.Repeat(one, 10_000/len(one)+1)
}

// llamaTokenize is llama.cpp's own tool, when a build is at hand.
const llamaTokenize = "/root/.cache/llamacpp-ref/bin/llama-tokenize"

var refRates sync.Map // vocab → float64 tokens/s of llama.cpp

// referenceRate measures llama.cpp's encode speed on the same text: it
// tokenizes the text repeated 10 and 500 times and divides the extra tokens
// by the extra time, which cancels process start and vocab loading. The
// tool also prints the ids, which is charged to llama.cpp, so the ratio
// leans slightly in our favour. Returns 0 when no build is available.
func referenceRate(b *testing.B, name, text string) float64 {
	if r, ok := refRates.Load(name); ok {
		return r.(float64)
	}
	model := filepath.Join(llamaModels, "ggml-vocab-"+name+".gguf")
	if _, err := os.Stat(llamaTokenize); err != nil {
		return 0
	}
	if _, err := os.Stat(model); err != nil {
		return 0
	}
	run := func(reps int) (int, time.Duration) {
		f := filepath.Join(b.TempDir(), "in.txt")
		if err := os.WriteFile(f, []byte(strings.Repeat(text, reps)), 0o600); err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(llamaTokenize, "-m", model, "-f", f, "--ids", "--log-disable", "--no-escape", "--no-bos")
		var out bytes.Buffer
		cmd.Stdout = &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("llama-tokenize: %v", err)
		}
		elapsed := time.Since(start)
		var ids []int
		if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &ids); err != nil {
			b.Fatalf("llama-tokenize output: %v", err)
		}
		return len(ids), elapsed
	}
	n1, t1 := run(10)
	n2, t2 := run(500)
	rate := float64(n2-n1) / (t2 - t1).Seconds()
	refRates.Store(name, rate)
	return rate
}

func benchEncode(b *testing.B, name string) {
	tk, _, _ := loadVocab(b, name)
	text := benchText(b, name)
	ref := referenceRate(b, name, text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	var ids []uint32
	for b.Loop() {
		ids = tk.AppendEncode(ids[:0], text, EncodeOptions{})
	}
	rate := float64(len(ids)) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "tokens/s")
	if ref > 0 {
		b.ReportMetric(ref, "llama.cpp-tokens/s")
		b.ReportMetric(rate/ref, "x-llama.cpp")
	}
}

func BenchmarkEncodeSPM(b *testing.B)    { benchEncode(b, "llama-spm") }
func BenchmarkEncodeLlama3(b *testing.B) { benchEncode(b, "llama-bpe") }
func BenchmarkEncodeGPT2(b *testing.B)   { benchEncode(b, "gpt-2") }
func BenchmarkEncodeWPM(b *testing.B)    { benchEncode(b, "bert-bge") }
func BenchmarkEncodeUGM(b *testing.B)    { benchEncode(b, "nomic-bert-moe") }

func BenchmarkDecodeStream(b *testing.B) {
	tk, _, _ := loadVocab(b, "llama-bpe")
	ids := tk.Encode(benchText(b, "llama-bpe"), EncodeOptions{})
	b.ResetTimer()
	for b.Loop() {
		d := tk.NewDecoder(DecodeOptions{})
		for _, id := range ids {
			if _, err := d.Next(id); err != nil {
				b.Fatal(err)
			}
		}
		d.Flush()
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}
