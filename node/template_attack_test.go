package node

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
)

// hostileTemplateModel writes the llama fixture with the built-in model's
// vocabulary and src as its chat template, and returns its path.
func hostileTemplateModel(t *testing.T, src string) string {
	t.Helper()
	f, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tmpl, err := gguf.ValueOf(src)
	if err != nil {
		t.Fatal(err)
	}
	md, err := gguf.NewMetadata(append(f.Metadata.KVs(), gguf.KV{Key: "tokenizer.chat_template", Value: tmpl}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := modeltest.Generate(modeltest.Fixture("llama", "Q8_0"), md)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "hostile-template.gguf")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAttackHostileChatTemplate: a model file whose chat template asks,
// at render time, for ten gigabytes (a string repeated), for a string
// doubled sixty times, for a macro that calls itself by another name, or
// for a list that holds itself printed: each had crashed the node (out of
// memory, or the stack overflowed) at its first chat request. Each chat
// request is now answered 400 invalid_prompt naming the limit it passed,
// having allocated a small part of what it asked for, and the node goes
// on serving the model's completions.
func TestAttackHostileChatTemplate(t *testing.T) {
	for _, tc := range []struct{ name, src, limit string }{
		{"string repeated", `{{ 'x' * 10000000000 }}`, "bytes of values made"},
		{"string doubled", `{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, "bytes of values made"},
		{"macro by another name", `{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ g() }}`, "macro calls nest deeper than"},
		{"list that holds itself", `{% set l = [1] %}{% set _ = l.append(l) %}{{ l }}`, "a value nests deeper than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hostileTemplateModel(t, tc.src)
			name := strings.TrimSuffix(filepath.Base(path), ".gguf")
			n, _ := startNode(t, Config{Models: []string{path}})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			code, v := answerOf(t, n, "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`, name))
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			e, _ := v["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if code != http.StatusBadRequest || e["code"] != "invalid_prompt" || !strings.Contains(msg, tc.limit) {
				t.Fatalf("%d %v, want 400 invalid_prompt naming %q", code, v, tc.limit)
			}
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("refused in %v, %d MiB allocated: %s", took.Round(time.Millisecond), allocated>>20, msg)
			if allocated > 4*64<<20 { // a few times the byte limit, 64 MiB and 32 bytes a byte of input
				t.Errorf("refusing allocated %d MiB", allocated>>20)
			}
			if text, _ := generate(t, n, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"A man walks into a bar","max_tokens":4}`, name)); text == "" {
				t.Fatal("no completion after the refusal")
			}
		})
	}
}
