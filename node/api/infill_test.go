package api

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestInfill: /infill reads llama-server's request into a Generation
// whose Infill holds the text around the gap and the other files' (a
// chunk without a filename is llama-server's "tmp"), its Prompt the start
// of the middle, the rest as /completion reads it; it answers in
// /completion's shape, whole and streamed.
func TestInfill(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	code, _, b := ollamaPost(t, h, "/infill", `{"model":"tiny","input_prefix":"def f():\n    ","input_suffix":"\n\nf()","prompt":"ret",
		"input_extra":[{"filename":"a.py","text":"x = 1"},{"text":"y = 2"}],"n_predict":8,"top_k":5,"cache_prompt":true}`)
	var a llamaAnswer
	if err := json.Unmarshal(b, &a); err != nil || code != 200 || a.Content != "Hello, world!" || a.StopType != "eos" || a.GenerationSettings["n_predict"] != 8.0 {
		t.Fatalf("%d %s", code, b)
	}
	g := h.model.lastCall()
	in := g.Infill
	if in == nil || in.Prefix != "def f():\n    " || in.Suffix != "\n\nf()" || g.Prompt != "ret" || len(in.Extra) != 2 ||
		in.Extra[0] != (InfillChunk{"a.py", "x = 1"}) || in.Extra[1] != (InfillChunk{"tmp", "y = 2"}) || g.MaxTokens != 8 || g.TopK != 5 {
		t.Fatalf("generation %+v, infill %+v", g, in)
	}
	// Empty texts are an infill too; no prompt is an empty middle.
	if code, _, b := ollamaPost(t, h, "/infill", `{"model":"tiny","input_prefix":"","input_suffix":""}`); code != 200 {
		t.Fatalf("empty texts: %d %s", code, b)
	}
	if g := h.model.lastCall(); g.Infill == nil || g.Prompt != "" || g.MaxTokens != math.MaxInt32 {
		t.Fatalf("empty texts: %+v", g)
	}
	resp := h.post(t, "/infill", `{"model":"tiny","input_prefix":"a","input_suffix":"b","stream":true}`)
	events := readSSE(t, resp.Body)
	resp.Body.Close()
	var content strings.Builder
	for _, e := range events {
		var ev llamaAnswer
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatal(err)
		}
		content.WriteString(ev.Content)
	}
	if content.String() != "Hello, world!" {
		t.Errorf("streamed %q", content.String())
	}
}

// TestInfillRefusals: what /infill cannot take is refused by name:
// missing texts, a prompt of ids, a malformed or oversized input_extra,
// and /completion's own refusals.
func TestInfillRefusals(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	many := `[` + strings.Repeat(`{"text":"x"},`, maxInfillChunks) + `{"text":"x"}]`
	for body, param := range map[string]string{
		`{"model":"tiny","input_suffix":"b"}`:                                          "input_prefix",
		`{"model":"tiny","input_prefix":"a"}`:                                          "input_suffix",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","prompt":[1,2]}`:        "prompt",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","input_extra":{}}`:      "input_extra",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","input_extra":[{}]}`:    "input_extra",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","input_extra":` + many:  "input_extra",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","n_indent":-4}`:         "n_indent",
		`{"model":"tiny","input_prefix":"a","input_suffix":"b","t_max_prompt_ms":1e9}`: "t_max_prompt_ms",
		`{"model":"tiny","input_prefix":1,"input_suffix":"b"}`:                         "input_prefix",
	} {
		if !strings.HasSuffix(body, "}") {
			body += "}"
		}
		n := len(h.model.calls)
		code, _, b := ollamaPost(t, h, "/infill", body)
		if code != 400 || !strings.Contains(string(b), `"param":"`+param+`"`) || len(h.model.calls) != n {
			t.Errorf("%s: %d %s", body, code, b)
		}
	}
}
