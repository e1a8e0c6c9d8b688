package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// TestFillInTheMiddle: a suffix's prompt is llama.cpp's infill prompt —
// BOS where the vocabulary adds it, FIM_PRE, the prefix, FIM_SUF, the
// suffix, FIM_MID — the texts tokenized with no control token read from
// them (a suffix holding "<fim_middle>" is that text). The ids of the
// texts are llama-tokenize's (--no-bos --no-parse-special) on the same
// vocabularies; a vocabulary without FIM tokens is refused.
func TestFillInTheMiddle(t *testing.T) {
	const prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))  # <fim_middle>"
	for _, tc := range []struct {
		vocab string
		want  []uint32
	}{
		{"deepseek-coder", slices.Concat([]uint32{32013, 32016}, []uint32{1551, 957, 7, 64, 11, 270, 1772, 185, 251}, []uint32{32015},
			[]uint32{185, 185, 4128, 7, 1761, 7, 16, 11, 207, 17, 1435, 207, 1494, 1013, 69, 308, 62, 22866, 29}, []uint32{32017})},
		{"starcoder", slices.Concat([]uint32{1}, []uint32{610, 1035, 45, 102, 49, 342, 731, 294}, []uint32{3},
			[]uint32{222, 222, 1243, 45, 688, 45, 54, 49, 244, 55, 509, 244, 607, 350, 107, 468, 100, 10519, 67}, []uint32{2})},
	} {
		tok := testVocab(t, tc.vocab)
		got, err := fillInTheMiddle(tok, prefix, suffix, 1<<20)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v\nwant %v", tc.vocab, got, err, tc.want)
		}
		var long *promptTooLongError
		if _, err := fillInTheMiddle(tok, prefix, suffix, len(tc.want)-1); !errors.As(err, &long) || long.AtLeast != len(tc.want) {
			t.Errorf("%s within %d tokens: %v", tc.vocab, len(tc.want)-1, err)
		}
	}
	// Through renderPrompt, as a completion with a suffix is rendered.
	tok := testVocab(t, "starcoder")
	if _, ids, err := renderPrompt(tok, nil, &api.Generation{Prompt: prefix, Suffix: suffix}, 1<<20); err != nil || ids[0] != 1 || ids[len(ids)-1] != 2 {
		t.Errorf("renderPrompt with a suffix: %v, %v", ids, err)
	}
	if _, err := fillInTheMiddle(testVocab(t, "llama-spm"), prefix, suffix, 1<<20); !errors.Is(err, errNoFIM) {
		t.Errorf("a vocabulary without FIM tokens: %v", err)
	}
}

// coderFixture writes a fixture on StarCoder2's vocabulary, which has FIM
// tokens, as coder.gguf, and returns its path and its tokenizer (the
// file's: a fixture keeps 2048 of the vocabulary's tokens).
func coderFixture(t *testing.T) (string, *tokenizer.Tokenizer) {
	t.Helper()
	b, err := modeltest.Generate(modeltest.StageFixture("llama", "Q8_0", 2), testVocabFile(t, "starcoder").Metadata)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "coder.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	return path, tok
}

// TestSuffixServed: a completion with a suffix is served by a model with
// FIM tokens (a fixture on StarCoder's vocabulary), its prompt the
// infill's (usage counts its tokens), sealed by the ids' hash, and it
// replays; a request on a grant, whose id covers the prompt alone, and
// the built-in model, which has no FIM tokens, refuse it saying so.
func TestSuffixServed(t *testing.T) {
	tok := testVocab(t, "starcoder")
	path, _ := coderFixture(t)
	n, _ := startNode(t, Config{Models: []string{path, fortunesPath(t)}})
	const prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))"
	body, _ := json.Marshal(map[string]any{"model": "coder", "prompt": prefix, "suffix": suffix, "max_tokens": 4})
	var got struct {
		Usage struct {
			PromptTokens int             `json:"prompt_tokens"`
			Energy       json.RawMessage `json:"energy"`
		} `json:"usage"`
	}
	postJSON(t, n, "/v1/completions", string(body), &got)
	want, err := fillInTheMiddle(tok, prefix, suffix, 1<<20)
	if err != nil || got.Usage.PromptTokens != len(want) {
		t.Fatalf("prompt_tokens %d, the infill prompt's %d (%v)", got.Usage.PromptTokens, len(want), err)
	}
	replay, _ := json.Marshal(map[string]any{"request": json.RawMessage(body), "energy": got.Usage.Energy})
	if status, res, raw := replayRaw(t, n, string(replay)); status != 200 || res.Verdict != api.VerdictVerified {
		t.Errorf("replay: %d %s", status, raw)
	}
	// On a grant the binding's request id covers the prompt alone.
	caller, chain := issueGrant(t, n)
	presented, _, err := grant.PresentBody([]byte(`{"model":"coder","prompt":"a","suffix":"b","metadata":{"joule_ceiling_uj":1000000000}}`), chain, caller, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, v := answerOf(t, n, "/v1/completions", string(presented)); code != 400 || !strings.Contains(fmt.Sprint(v), "param:suffix") {
		t.Errorf("a granted suffix: %d %v", code, v)
	}
	code, v := answerOf(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"a","suffix":"b"}`)
	if e, _ := v["error"].(map[string]any); code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "no fill-in-the-middle tokens") {
		t.Errorf("the built-in model with a suffix: %d %v", code, v)
	}
}
