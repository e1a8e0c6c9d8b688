package chat

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

var threeTurns = []Message{
	{Role: "system", Content: "Be brief."},
	{Role: "user", Content: "Hi"},
	{Role: "assistant", Content: "Hello."},
	{Role: "user", Content: "Bye"},
}

func TestTranscript(t *testing.T) {
	tpl, err := Compile("", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Kind() != "transcript" {
		t.Fatalf("kind %q", tpl.Kind())
	}
	for _, tc := range []struct {
		msgs []Message
		agp  bool
		want string
	}{
		{[]Message{{Role: "user", Content: "A man walks into a bar"}}, true, "A man walks into a bar"},
		{threeTurns, true, "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Bye\n\nAssistant:"},
		{threeTurns, false, "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello.\n\nUser: Bye"},
		{threeTurns[1:3], true, "User: Hi\n\nAssistant: Hello."},
		{nil, true, "Assistant:"},
		{nil, false, ""},
	} {
		got, err := tpl.Apply(tc.msgs, tc.agp)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Apply(%v, %v) = %q, want %q", tc.msgs, tc.agp, got, tc.want)
		}
	}
}

// TestBuiltinFormats pins llama.cpp's built-in formats (the expected
// strings are those of llama.cpp's test-chat-template for its conversation)
// and checks that a template Jinja cannot compile is recognised.
func TestBuiltinFormats(t *testing.T) {
	conv := []Message{
		{Role: "system", Content: "You are a helpful assistant"},
		{Role: "user", Content: "Hello"},
		{Role: "assistant", Content: "Hi there"},
		{Role: "user", Content: "Who are you"},
		{Role: "assistant", Content: "   I am an assistant   "},
		{Role: "user", Content: "Another question"},
	}
	want := map[string]string{
		"chatml": "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n",
		"llama3": "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		"phi3":   "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n",
		"gemma":  "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n",
		"llama2": "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   </s>[INST] Another question [/INST]",
	}
	for name, w := range want {
		tpl, err := Compile(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := tpl.Apply(conv, true); got != w {
			t.Errorf("%s:\n got %q\nwant %q", name, got, w)
		}
	}

	// Unclosed tags: Jinja cannot compile these, the markers identify them.
	for src, kind := range map[string]string{
		"{% for m in messages %}{{ '<|im_start|>' + m.role }":                           "builtin:chatml",
		"{% for m in messages %}<start_of_turn>{{ m.role ":                              "builtin:gemma",
		"{{ bos_token + '[INST] ' + '<<SYS>>' + content.strip() {% if":                  "builtin:llama2",
		"<|start_header_id|>{{ m['role'] }<|end_header_id|>{% endfor":                   "builtin:llama3",
		"{% for m in messages %}{{'<|' + m.role + '|>\n'}}{{ '<|end|><|assistant|>' {%": "builtin:phi3",
	} {
		tpl, err := Compile(src, Options{})
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		if tpl.Kind() != kind {
			t.Errorf("%q: kind %s, want %s", src, tpl.Kind(), kind)
		}
	}
	// llama2 detection picks the variant from the markers, as llama.cpp does.
	tpl, _ := Compile("{{ bos_token + '[INST] ' + '<<SYS>>' + content.strip() {% if", Options{})
	if got, _ := tpl.Apply(conv, true); got != "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are you [/INST]I am an assistant</s><s>[INST] Another question [/INST]" {
		t.Errorf("llama2 sys/bos/strip variant: %q", got)
	}
}

func TestErrors(t *testing.T) {
	if _, err := Compile("{% for m in messages %}{{ m.content }", Options{}); !errors.Is(err, ErrTemplate) {
		t.Errorf("unknown broken template: err = %v, want ErrTemplate", err)
	}
	tpl, err := Compile("{{ messages[0].content | no_such_filter }}", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tpl.Apply(threeTurns, true); !errors.Is(err, ErrTemplate) {
		t.Errorf("render failure: err = %v, want ErrTemplate", err)
	}
	tpl, err = Compile("{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}ok", Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tpl.Apply(threeTurns, true)
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Reason != "one message only" || errors.Is(err, ErrTemplate) {
		t.Errorf("raise_exception: err = %v, want *RejectedError", err)
	}
	if got, err := tpl.Apply(threeTurns[:1], true); err != nil || got != "ok" {
		t.Errorf("Apply = %q, %v", got, err)
	}
}

// TestRange: Python's range, but a hostile template cannot make it build
// billions of elements.
func TestRange(t *testing.T) {
	for src, want := range map[string]string{
		"{% for i in range(3) %}{{ i }}{% endfor %}":         "012",
		"{% for i in range(2, 8, 3) %}{{ i }}{% endfor %}":   "25",
		"{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}":  "531",
		"{% for i in range(3, 3) %}{{ i }}{% endfor %}x":     "x",
		"{{ range(messages|length)|list|length }}":           "4",
		"{% for i in range(0, 10, -1) %}{{ i }}{% endfor %}": "",
	} {
		tpl, err := Compile(src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tpl.Apply(threeTurns, false); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
	for _, src := range []string{
		"{% for i in range(10000000000) %}x{% endfor %}",
		"{% for i in range(0, 2) %}{% for j in range(-5000000000, 0) %}{% endfor %}{% endfor %}",
		"{{ range(1, 2, 0) }}",
		"{{ range('a') }}",
	} {
		tpl, err := Compile(src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tpl.Apply(threeTurns, false); !errors.Is(err, ErrTemplate) {
			t.Errorf("%s: err = %v, want ErrTemplate", src, err)
		}
	}
}

func TestStripBOSAndClock(t *testing.T) {
	tpl, err := Compile("{{ bos_token }}{{ strftime_now('%d %b %Y, %A %-d %H:%M') }}{{ eos_token }}",
		Options{BOS: "<s>", EOS: "</s>", StripBOS: true, StripEOS: true, Now: func() time.Time { return goldenNow }})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Apply(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := "15 Jan 2026, Thursday 15 09:30"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func readVocabGGUF(t *testing.T, name string) *gguf.File {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("../tokenizer/testdata", "ggml-vocab-"+name+".gguf.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestFromGGUF uses the templates llama.cpp's vocab files carry: Qwen2's
// ChatML and Phi-3's, whose tokenizer adds BOS itself, so the template's
// leading "<s>" is dropped as llama.cpp does.
func TestFromGGUF(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "Hi"}}
	for name, want := range map[string]string{
		"qwen2": "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
		"phi-3": "<|user|>\nHi<|end|>\n<|assistant|>\n",
	} {
		f := readVocabGGUF(t, name)
		tpl, err := FromGGUF(f.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tpl.Apply(msgs, true)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	// The fortunes model has no template: the transcript, so a single
	// prompt is continued as plain text.
	f, err := gguf.Open("/work/shared/models/meshnode-fortunes-f16.gguf")
	if err != nil {
		t.Skipf("fortunes model: %v", err)
	}
	defer f.Close()
	tpl, err := FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tpl.Apply([]Message{{Role: "user", Content: "A man walks into a bar"}}, true); tpl.Kind() != "transcript" || got != "A man walks into a bar" {
		t.Errorf("fortunes: kind %s, prompt %q", tpl.Kind(), got)
	}
	if tpl.Source() != "" {
		t.Errorf("fortunes: source %q, want none", tpl.Source())
	}
}

// FuzzCompile feeds arbitrary template text (a GGUF file is outside input):
// compiling and applying never panics, and failures are ErrTemplate or a
// rejection.
func FuzzCompile(f *testing.F) {
	entries, err := os.ReadDir("testdata/templates")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata/templates", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("{% for m in messages %}{{ m.content")
	// Macros that call themselves, or each other, without end, by
	// another name too (TestMacroDepth).
	f.Add(`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`)
	f.Add(`{% macro f() %}{{ g() }}{% endmacro %}{% macro g() %}{% call f() %}{% endcall %}{% endmacro %}{{ g() }}`)
	f.Add(`{% macro f() %}{{ g() }}{% endmacro %}{% set g = f %}{{ g() }}`)
	// What a render spends (TestRenderLimits).
	f.Add(`{{ 'x' * 1000000000 }}`)
	f.Add(`{% set l = [1] %}{% set _ = l.append(l) %}{{ l }}`)
	// Nesting at and past the bound (checkBounds).
	for _, d := range []int{maxTemplateDepth, maxTemplateDepth + 1} {
		f.Add("{{ " + strings.Repeat("(", d) + "1" + strings.Repeat(")", d) + " }}")
		f.Add(strings.Repeat("{% if 1 %}", d) + "x" + strings.Repeat("{% endif %}", d))
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Compile(src, Options{BOS: "<s>", EOS: "</s>", Now: func() time.Time { return goldenNow }})
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("Compile: %v is not ErrTemplate", err)
			}
			return
		}
		if _, err := tpl.Apply(threeTurns, true); err != nil {
			var rej *RejectedError
			if !errors.Is(err, ErrTemplate) && !errors.As(err, &rej) {
				t.Fatalf("Apply: unexpected error %v", err)
			}
		}
	})
}

// TestPromptTokens renders a conversation with Qwen2's template and
// encodes it the way the engine does (specials parsed): the chat markers
// become their single control tokens.
func TestPromptTokens(t *testing.T) {
	f := readVocabGGUF(t, "qwen2")
	tpl, err := FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := tpl.Apply([]Message{{Role: "user", Content: "Hi"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	ids := tk.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
	start, _ := tk.Lookup("<|im_start|>")
	end, _ := tk.Lookup("<|im_end|>")
	var starts, ends int
	for _, id := range ids {
		switch id {
		case start:
			starts++
		case end:
			ends++
		}
	}
	if ids[0] != start || starts != 3 || ends != 2 {
		t.Errorf("prompt %q encodes to %v: want 3 <|im_start|> (first) and 2 <|im_end|>", prompt, ids)
	}
	if back, _ := tk.Decode(ids, tokenizer.DecodeOptions{RenderSpecial: true}); back != prompt {
		t.Errorf("decoded prompt %q, want %q", back, prompt)
	}
}
