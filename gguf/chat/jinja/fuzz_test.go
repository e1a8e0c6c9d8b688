package jinja

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRender: no template, rendered within small limits, allocates more
// than mostAllocated, or crashes the process the way no recover can (a
// stack overflow, memory exhausted). A panic of the engine's own (an
// index out of range) is recovered here as gguf/chat recovers it, into a
// template error. Seeded from the chat templates gguf/chat renders and
// TestRenderLimits's attacks, over a conversation with a tool.
func FuzzRender(f *testing.F) {
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "templates", "*.jinja"))
	if err != nil || len(paths) == 0 {
		f.Fatalf("no chat templates to seed from: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, src := range []string{
		`{{ 'x' * 10000000000 }}`,
		`{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`,
		`{% set l = [1] %}{% set _ = l.append(l) %}{{ l }}{{ l == l }}{{ l | tojson }}`,
		`{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ g() }}`,
		`{{ ('{0}' * 1000).format('y' * 10000) }}{{ 'a\nb' | indent(10000000000) }}`,
		`{{ '%s %r %d %f %%' % ([1] * 4) }}{{ [0] * 3 | map('string') | join }}{{ -7 // 2 }}{{ 2 ** 62 }}`,
		`{{ '{:*^{w}.{p}f}|{0!r:>8}|{x[k]}'.format(3.5, w=9, p=2, x={'k': 1}) }}{{ '%(a)-*.*s|%#08x|%+.3e' % {'a': 'b'} }}`,
		`{{ '%-*d|%05.1f|%c' % (6, 7, -2.25, 66) }}{{ '%s' | format(1) }}{% set a, (b) = 1, 2 %}{{ 1 < a < 3 is even }}`,
	} {
		f.Add(src)
	}
	messages := FromGoValue([]any{
		map[string]any{"role": "system", "content": "Be brief."},
		map[string]any{"role": "user", "content": "What is the weather in Paris?"},
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
			"id": "call_1", "type": "function",
			"function": map[string]any{"name": "weather", "arguments": map[string]any{"city": "Paris"}},
		}}},
		map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
	})
	tools := FromGoValue([]any{map[string]any{"type": "function", "function": map[string]any{
		"name": "weather", "description": "The weather in a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}})
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 20<<10 {
			// gguf/chat bounds a template's length and nesting before
			// the parser (which recurses) sees it; this bounds nesting
			// too, within what the stack holds.
			return
		}
		tpl, err := compileRecovered(src)
		if err != nil {
			return
		}
		data := map[string]Value{
			"messages": messages, "tools": tools, "add_generation_prompt": NewBool(true),
			"bos_token": NewString("<s>"), "eos_token": NewString("</s>"),
		}
		if spent := allocated(func() { renderRecovered(tpl, data) }); spent > mostAllocated {
			t.Fatalf("allocated %d bytes, more than %d", spent, mostAllocated)
		}
	})
}

// compileRecovered is Compile with the engine's own panics recovered, as
// gguf/chat compiles.
func compileRecovered(src string) (tpl *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			tpl, err = nil, errors.New("the engine panicked")
		}
	}()
	return Compile(src)
}

// renderRecovered renders within small, the engine's own panics
// recovered, as gguf/chat renders.
func renderRecovered(tpl *Template, data map[string]Value) {
	defer func() { _ = recover() }()
	_, _ = tpl.RenderLimited(data, small)
}
