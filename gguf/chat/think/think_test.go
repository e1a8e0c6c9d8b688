package think

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var qwen = Tags{"<think>", "</think>"}

// replies are outputs of models that reason in a block, as the decoder
// writes them (the tags as text), with the split llama-server's
// reasoning_format "deepseek" makes of them.
var replies = []struct {
	name               string
	tags               Tags
	open               bool
	text               string
	reasoning, content string
}{
	{"block then answer", qwen, false, "<think>\nThe user asks 2+2. Easy.\n</think>\n\n2 + 2 = 4.", "The user asks 2+2. Easy.", "2 + 2 = 4."},
	{"empty block (thinking off)", qwen, false, "<think>\n\n</think>\n\nHello!", "", "Hello!"},
	{"no block", qwen, false, "Just an answer, with a <think> in it.", "", "Just an answer, with a <think> in it."},
	{"no block keeps its white space", qwen, false, "\n  Hello.  \n", "", "\n  Hello.  \n"},
	{"white space only", qwen, false, " \n", "", " \n"},
	{"a tag's first bytes only", qwen, false, "<thi", "", "<thi"},
	{"white space before the block", qwen, false, "\n\n<think>a</think>b", "a", "b"},
	{"cut short in the block", qwen, false, "<think>Let me think about", "Let me think about", ""},
	{"cut short in the closing tag", qwen, false, "<think>Let me think</thi", "Let me think</thi", ""},
	{"opened by the prompt", qwen, true, "\nThe prompt opened it.\n</think>\n\nAnswer.", "The prompt opened it.", "Answer."},
	{"opened by the prompt, cut short", qwen, true, "Still thinking", "Still thinking", ""},
	{"opened by the prompt, the model's own open tag is markup", qwen, true, "\n<think>x</think>y", "x", "y"},
	{"opened by the prompt, a tag later in the reasoning is text", qwen, true, "a <think> b</think>c", "a <think> b", "c"},
	{"opened by the prompt, cut short in a tag's first bytes", qwen, true, "<thi", "<thi", ""},
	{"a second block is content", qwen, false, "<think>a</think>b<think>c</think>", "a", "b<think>c</think>"},
	{"reasoning keeps its inner white space", qwen, false, "<think>one\n\ntwo  three</think>four\nfive", "one\n\ntwo  three", "four\nfive"},
	{"a near-tag inside", qwen, false, "<think>a </thinking> b</think>c", "a </thinking> b", "c"},
	{"magistral", Tags{"[THINK]", "[/THINK]"}, false, "[THINK]Hmm.[/THINK]Yes.", "Hmm.", "Yes."},
	{"cohere", Tags{"<|START_THINKING|>", "<|END_THINKING|>"}, false, "<|START_THINKING|>plan<|END_THINKING|><|START_RESPONSE|>hi", "plan", "<|START_RESPONSE|>hi"},
	{"unicode", qwen, false, "<think>Größe 🙂</think>日本語", "Größe 🙂", "日本語"},
}

func TestSplit(t *testing.T) {
	for _, r := range replies {
		t.Run(r.name, func(t *testing.T) {
			reasoning, content := Split(r.tags, r.open, r.text)
			if reasoning != r.reasoning || content != r.content {
				t.Errorf("Split(%q)\n reasoning %q, want %q\n content   %q, want %q", r.text, reasoning, r.reasoning, content, r.content)
			}
		})
	}
}

// stream feeds pieces to a parser and returns the reasoning and content
// its events accumulate.
func stream(tags Tags, open bool, pieces ...string) [2]string {
	p := NewParser(tags, open)
	var by [2]strings.Builder
	var evs []Event
	for _, s := range pieces {
		evs = append(evs, p.Feed(s)...)
	}
	for _, e := range append(evs, p.Finish()...) {
		if e.Reasoning {
			by[0].WriteString(e.Text)
		} else {
			by[1].WriteString(e.Text)
		}
	}
	return [2]string{by[0].String(), by[1].String()}
}

// TestStreamAnyCut: fed in two pieces cut at every byte, or one byte at
// a time, the parser hands out what Split does.
func TestStreamAnyCut(t *testing.T) {
	for _, r := range replies {
		for cut := 0; cut <= len(r.text); cut++ {
			got := stream(r.tags, r.open, r.text[:cut], r.text[cut:])
			if got[0] != r.reasoning || got[1] != r.content {
				t.Fatalf("%s cut at %d: %q, want %q / %q", r.name, cut, got, r.reasoning, r.content)
			}
		}
		if got := stream(r.tags, r.open, strings.Split(r.text, "")...); got[0] != r.reasoning || got[1] != r.content {
			t.Fatalf("%s byte by byte: %q", r.name, got)
		}
	}
}

// TestStreamsAsItGoes: the reasoning goes out as it is decoded, not when
// its block closes; only a possible tag and trailing white space wait.
func TestStreamsAsItGoes(t *testing.T) {
	p := NewParser(qwen, false)
	if evs := p.Feed("<thi"); len(evs) != 0 {
		t.Fatalf("a tag's start went out: %v", evs)
	}
	if evs := p.Feed("nk>\nStep one. "); len(evs) != 1 || evs[0] != (Event{Reasoning: true, Text: "Step one."}) {
		t.Fatalf("after the opening tag: %v", evs)
	}
	if evs := p.Feed("Step two.</"); len(evs) != 1 || evs[0].Text != " Step two." {
		t.Fatalf("held white space goes out with the next text: %v", evs)
	}
	if evs := p.Feed("think>\n\nDone"); len(evs) != 1 || evs[0] != (Event{Text: "Done"}) {
		t.Fatalf("after the closing tag: %v", evs)
	}
}

func TestFeedTokenKinds(t *testing.T) {
	p := NewParser(qwen, false)
	var kinds []Kind
	for _, tok := range []string{"<think>", "\n", "Hm", ".", "</think>", "\n\n", "Yes"} {
		_, k := p.FeedToken(tok)
		kinds = append(kinds, k)
	}
	want := []Kind{Markup, Reasoning, Reasoning, Reasoning, Markup, Content, Content}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	p = NewParser(qwen, true)
	if _, k := p.FeedToken("Hm"); k != Reasoning {
		t.Fatalf("opened by the prompt: the first token is %v", k)
	}
}

// TestDetect reads the reasoning blocks off real chat templates
// (gguf/chat/testdata/templates), and whether their generation prompt
// opens the block.
func TestDetect(t *testing.T) {
	for _, c := range []struct {
		file string
		tags Tags
		ok   bool
	}{
		{"Qwen-Qwen3-0.6B.jinja", qwen, true},
		{"Qwen-QwQ-32B.jinja", qwen, true},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", qwen, true},
		{"HuggingFaceTB-SmolLM3-3B.jinja", qwen, true},
		{"GLM-4.6.jinja", qwen, true},
		{"mistralai-Ministral-3-14B-Reasoning-2512.jinja", Tags{"[THINK]", "[/THINK]"}, true},
		{"Cohere2MoE.jinja", Tags{"<|START_THINKING|>", "<|END_THINKING|>"}, true},
		{"chatml-qwen2.jinja", Tags{}, false},
		{"meta-llama-Llama-3.1-8B-Instruct.jinja", Tags{}, false},
	} {
		src, err := os.ReadFile(filepath.Join("..", "testdata", "templates", c.file))
		if err != nil {
			t.Fatal(err)
		}
		tags, ok := Detect(string(src))
		if tags != c.tags || ok != c.ok {
			t.Errorf("%s: %v %v, want %v %v", c.file, tags, ok, c.tags, c.ok)
		}
	}
}

func TestOpens(t *testing.T) {
	for _, c := range []struct {
		prompt string
		want   bool
	}{
		{"<|im_start|>assistant\n<think>\n", true},
		{"<|im_start|>assistant\n<think>", true},
		{"<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"<|im_start|>assistant\n", false},
	} {
		if got := qwen.Opens(c.prompt); got != c.want {
			t.Errorf("Opens(%q) = %v", c.prompt, got)
		}
	}
}

func FuzzParser(f *testing.F) {
	for _, r := range replies {
		f.Add(r.text, uint16(len(r.text)/2), r.open)
	}
	f.Fuzz(func(t *testing.T, text string, cut uint16, open bool) {
		c := int(cut) % (len(text) + 1)
		reasoning, content := Split(qwen, open, text)
		got := stream(qwen, open, text[:c], text[c:])
		if got[0] != reasoning || got[1] != content {
			t.Fatalf("cut at %d: %q, whole %q / %q", c, got, reasoning, content)
		}
		if len(reasoning)+len(content) > len(text) {
			t.Fatalf("more out (%d) than in (%d)", len(reasoning)+len(content), len(text))
		}
		// The content is the end of the text, and a reply that does not
		// open the block reads back as it was.
		if !strings.HasSuffix(text, content) {
			t.Fatalf("content %q is not the end of %q", content, text)
		}
		if !open && !strings.HasPrefix(strings.TrimLeft(text, space), qwen.Open) && content != text {
			t.Fatalf("a reply without a block changed: %q -> %q", text, content)
		}
		// Fed as two tokens, FeedToken's events are Feed's.
		p := NewParser(qwen, open)
		var by [2]strings.Builder
		var evs []Event
		for _, tok := range []string{text[:c], text[c:]} {
			e, _ := p.FeedToken(tok)
			evs = append(evs, e...)
		}
		for _, e := range append(evs, p.Finish()...) {
			if e.Reasoning {
				by[0].WriteString(e.Text)
			} else {
				by[1].WriteString(e.Text)
			}
		}
		if by[0].String() != reasoning || by[1].String() != content {
			t.Fatalf("FeedToken: %q / %q, Feed %q / %q", by[0].String(), by[1].String(), reasoning, content)
		}
	})
}
