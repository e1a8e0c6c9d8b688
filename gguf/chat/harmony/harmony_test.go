package harmony

import (
	"slices"
	"strings"
	"testing"
)

// replies are gpt-oss outputs as llama-server's decoder writes them (the
// control tokens as text), with the split it makes of them.
var replies = []struct {
	name, text, reasoning, content string
}{
	{"analysis then final",
		"<|channel|>analysis<|message|>The user asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.",
		"The user asks 2+2. Easy.", "2 + 2 = 4."},
	{"final with its return",
		"<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
		"Think.", "Done."},
	{"final only", "<|channel|>final<|message|>Hello!", "", "Hello!"},
	{"no header", "Just text, <b>with</b> a < and a <| that is no marker.", "", "Just text, <b>with</b> a < and a <| that is no marker."},
	{"reasoning cut off by the token limit", "<|channel|>analysis<|message|>Let me think about", "Let me think about", ""},
	{"stopped mid-header", "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>fin", "Hm.", ""},
	{"commentary preamble is content",
		"<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking the weather now.<|end|>",
		"Plan.", "Checking the weather now."},
	{"a call to a recipient is not content",
		"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
		"Need weather.{\"city\":\"Oslo\"}", ""},
	{"recipient in the role", "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>", "{}", ""},
	{"white space between messages", "<|channel|>analysis<|message|>a<|end|>\n<|start|>assistant<|channel|>final<|message|>b", "a", "b"},
	{"several analysis messages", "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c<|end|>", "ab", "c"},
	{"unicode", "<|channel|>analysis<|message|>Größe 🙂<|end|><|start|>assistant<|channel|>final<|message|>日本語", "Größe 🙂", "日本語"},
}

func TestSplit(t *testing.T) {
	for _, r := range replies {
		t.Run(r.name, func(t *testing.T) {
			reasoning, content := Split(r.text)
			if reasoning != r.reasoning || content != r.content {
				t.Errorf("Split(%q)\n reasoning %q, want %q\n content   %q, want %q", r.text, reasoning, r.reasoning, content, r.content)
			}
		})
	}
}

// TestStreamAnyCut: fed in two pieces cut at every byte, or one byte at
// a time, the parser hands out the same reasoning and content as Split
// (whose results here have no piece of a control token in them).
func TestStreamAnyCut(t *testing.T) {
	for _, r := range replies {
		for cut := 0; cut <= len(r.text); cut++ {
			got := stream(r.text[:cut], r.text[cut:])
			if got[0] != r.reasoning || got[1] != r.content {
				t.Fatalf("%s cut at %d: %q, want %q / %q", r.name, cut, got, r.reasoning, r.content)
			}
		}
		bytes := strings.Split(r.text, "")
		if got := stream(bytes...); got[0] != r.reasoning || got[1] != r.content {
			t.Fatalf("%s byte by byte: %q", r.name, got)
		}
	}
}

func stream(pieces ...string) [2]string {
	var p Parser
	var out [2]strings.Builder
	add := func(evs []Event) {
		for _, e := range evs {
			if e.Reasoning {
				out[0].WriteString(e.Text)
			} else {
				out[1].WriteString(e.Text)
			}
		}
	}
	for _, s := range pieces {
		add(p.Feed(s))
	}
	add(p.Finish())
	return [2]string{out[0].String(), out[1].String()}
}

// TestHoldsBackOnlyMarkerPrefixes: text is handed out as soon as it cannot
// be the start of a control token.
func TestHoldsBackOnlyMarkerPrefixes(t *testing.T) {
	var p Parser
	evs := p.Feed("<|channel|>final<|message|>Hello <|")
	if len(evs) != 1 || evs[0].Text != "Hello " || evs[0].Reasoning {
		t.Fatalf("events %+v", evs)
	}
	if evs := p.Feed("x"); len(evs) != 1 || evs[0].Text != "<|x" {
		t.Fatalf("after a non-marker: %+v", evs)
	}
}

// FuzzParser: any text, cut anywhere, streams to what Split makes of it,
// and every byte of content and reasoning comes from the input.
func FuzzParser(f *testing.F) {
	for _, r := range replies {
		f.Add(r.text, uint16(len(r.text)/2))
	}
	f.Fuzz(func(t *testing.T, text string, cut uint16) {
		c := int(cut) % (len(text) + 1)
		reasoning, content := Split(text)
		got := stream(text[:c], text[c:])
		if got[0] != reasoning || got[1] != content {
			t.Fatalf("cut at %d: %q, whole %q / %q", c, got, reasoning, content)
		}
		if len(reasoning)+len(content) > len(text) {
			t.Fatalf("more out (%d) than in (%d)", len(reasoning)+len(content), len(text))
		}
		r := Parse(text, true)
		n := len(r.Reasoning) + len(r.Content)
		for _, c := range r.Calls {
			n += len(c.Name) + len(c.Arguments)
		}
		if n > len(text) {
			t.Fatalf("with calls, more out (%d) than in (%d)", n, len(text))
		}
		// Fed as two tokens, FeedToken's events are Feed's.
		var p Parser
		var evs []Event
		for _, tok := range []string{text[:c], text[c:]} {
			e, _ := p.FeedToken(tok)
			evs = append(evs, e...)
		}
		var by [2]strings.Builder
		for _, e := range append(evs, p.Finish()...) {
			if e.Reasoning {
				by[0].WriteString(e.Text)
			} else {
				by[1].WriteString(e.Text)
			}
		}
		if by[0].String() != reasoning || by[1].String() != content {
			t.Fatalf("FeedToken cut at %d: %q / %q, whole %q / %q", c, by[0].String(), by[1].String(), reasoning, content)
		}
	})
}

// TestCalls: with Calls set, a message to functions.NAME (the recipient
// after the channel or in the role) is a tool call whose arguments are the
// message's text, streamed in pieces that add up to Parse's whole call
// wherever the text is cut; other recipients stay reasoning.
func TestCalls(t *testing.T) {
	for _, tc := range []struct {
		text, reasoning, content string
		calls                    []Call
	}{
		{"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
			"Need weather.", "", []Call{{"get_weather", `{"city":"Oslo"}`}}},
		{"<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}", "", "", []Call{{"f", "{}"}}},
		{"<|channel|>commentary<|message|>Looking.<|end|><|start|>assistant<|channel|>commentary to=functions.a<|message|>{\"x\":1}<|end|><|start|>assistant<|channel|>commentary to=functions.b<|message|>{}",
			"", "Looking.", []Call{{"a", `{"x":1}`}, {"b", "{}"}}},
		{"<|channel|>analysis to=browser.search<|message|>{\"q\":\"x\"}<|end|><|start|>assistant<|channel|>final<|message|>ok", `{"q":"x"}`, "ok", nil},
	} {
		got := Parse(tc.text, true)
		if got.Reasoning != tc.reasoning || got.Content != tc.content || !slices.Equal(got.Calls, tc.calls) {
			t.Errorf("Parse(%q) = %+v, want %q %q %+v", tc.text, got, tc.reasoning, tc.content, tc.calls)
		}
		for cut := 0; cut <= len(tc.text); cut++ {
			p := Parser{Calls: true}
			var calls []Call
			for _, e := range slices.Concat(p.Feed(tc.text[:cut]), p.Feed(tc.text[cut:]), p.Finish()) {
				if e.Call == nil {
					continue
				}
				if e.Call.Index == len(calls) {
					calls = append(calls, Call{Name: e.Call.Name})
				} else if e.Call.Name != "" {
					t.Fatalf("cut %d: a later piece of call %d names it again", cut, e.Call.Index)
				}
				calls[e.Call.Index].Arguments += e.Call.Arguments
			}
			if !slices.Equal(calls, tc.calls) {
				t.Fatalf("cut %d of %q: calls %+v, want %+v", cut, tc.text, calls, tc.calls)
			}
		}
		// Without Calls, the call is reasoning.
		if r := Parse(tc.text, false); len(r.Calls) != 0 || r.Content != tc.content {
			t.Errorf("Parse(%q, false) = %+v", tc.text, r)
		}
	}
}

// tokens cuts a reply as a harmony tokenizer would, roughly: each marker
// a token, the text between in pieces of up to 3 bytes.
func tokens(text string) []string {
	var out []string
	for text != "" {
		if m, ok := marker(text); ok {
			out = append(out, m)
			text = text[len(m):]
			continue
		}
		n := min(3, len(text))
		for _, m := range Markers {
			if i := strings.Index(text[:n], m[:1]); i > 0 && strings.HasPrefix(text[i:], m) {
				n = i
			}
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return out
}

// TestFeedToken: token by token, the tokens FeedToken calls content,
// reasoning and arguments spell the reply's content, reasoning and calls'
// arguments, and the markers are markup.
func TestFeedToken(t *testing.T) {
	for _, r := range replies {
		for _, calls := range []bool{false, true} {
			p := Parser{Calls: calls}
			var by [4]strings.Builder
			for _, tok := range tokens(r.text) {
				_, k := p.FeedToken(tok)
				if _, ok := marker(tok); ok && k != Markup {
					t.Errorf("%s: marker %q is %v", r.name, tok, k)
				}
				by[k].WriteString(tok)
			}
			want := Parse(r.text, calls)
			var args strings.Builder
			for _, c := range want.Calls {
				args.WriteString(c.Arguments)
			}
			if by[Content].String() != want.Content || by[Reasoning].String() != want.Reasoning || by[Arguments].String() != args.String() {
				t.Errorf("%s (calls %v): content %q reasoning %q arguments %q; want %q %q %q", r.name, calls,
					by[Content].String(), by[Reasoning].String(), by[Arguments].String(), want.Content, want.Reasoning, args.String())
			}
		}
	}
}
