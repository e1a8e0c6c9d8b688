package ggufengine

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/quant"
)

// TestLoadWarmsUp: a model whose weights the CPU reads from memory has
// them packed by its load, not by its first request (on machines where
// such weights are packed at all: quant.PacksStreamed).
func TestLoadWarmsUp(t *testing.T) {
	saved := cpuOptions
	cpuOptions.CacheBytes = 1 // no weight stays cached: all are read from memory
	t.Cleanup(func() { cpuOptions = saved })

	var buf bytes.Buffer
	m, err := Load(fortunesPath, Config{Backend: BackendCPU, Context: 64, Log: logTo(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !strings.Contains(buf.String(), "warm_up=") || strings.Contains(buf.String(), "warm-up failed") {
		t.Errorf("the load did not say it warmed up:\n%s", buf.String())
	}
	if c := m.model.Config(); !quant.PacksStreamed(quant.Q8_0, c.Embd) && !quant.PacksStreamed(quant.Q8_0, c.FF) {
		t.Skipf("this CPU does not pack Q8_0 weights of %d or %d columns read from memory (quant.PacksStreamed)", c.Embd, c.FF)
	}
	if n := m.be.(*cpu.Backend).StreamedPacked(); n == 0 {
		t.Error("after the load no weight read from memory is packed: the first request would pack them")
	}
}
