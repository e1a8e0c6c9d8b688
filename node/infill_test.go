package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
)

// repoVocab is StarCoder2's vocabulary with its <repo_name> (5) and
// <file_sep> (6) named as the repo-level FIM tokens, as a file names
// them (tokenizer.ggml.fim_rep_token_id, fim_sep_token_id).
func repoVocab(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	v, err := tokenizer.VocabFromGGUF(testVocabFile(t, "starcoder").Metadata)
	if err != nil {
		t.Fatal(err)
	}
	v.FIMRep, v.FIMSep = 5, 6
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestInfillPrompt: /infill's prompt is llama-server's: the other files'
// text first (the repo-level pattern where the vocabulary has its
// tokens, a snippet separator where not), then FIM_PRE, the prefix, the
// start of the middle, FIM_SUF, the suffix and FIM_MID, each text
// tokenized on its own with no control token read from it; fitted to the
// room the answer leaves, the prefix keeping its end, the suffix its
// start, the other files' text what is left; a vocabulary without FIM
// tokens is refused.
func TestInfillPrompt(t *testing.T) {
	plain := tokenizer.EncodeOptions{}
	in := &api.Infill{Prefix: "def add(a, b):\n    ", Suffix: "\n\nprint(add(1, 2))  # <fim_middle>",
		Extra: []api.InfillChunk{{Filename: "util.py", Text: "def sub(a, b):\n    return a - b\n"}, {Filename: "tmp", Text: "x = 1"}}}
	gen := &api.Generation{Prompt: "return", Infill: in, MaxTokens: 16}

	tok := testVocab(t, "starcoder")
	enc := func(s string) []uint32 { return tok.Encode(s, plain) }
	core := slices.Concat([]uint32{1}, enc(in.Prefix), enc("return"), []uint32{3}, enc(in.Suffix), []uint32{2})
	snippet := enc("\n\n--- snippet ---\n\n")
	want := slices.Concat(snippet, enc(in.Extra[0].Text), snippet, enc(in.Extra[1].Text), core)
	if got, err := infillPrompt(tok, gen, 1<<20); err != nil || !slices.Equal(got, want) {
		t.Errorf("without repo tokens: %v, %v\nwant %v", got, err, want)
	}

	repo := repoVocab(t)
	enc = func(s string) []uint32 { return repo.Encode(s, plain) }
	want = slices.Concat([]uint32{5}, enc("myproject\n"), []uint32{6}, enc("util.py\n"), enc(in.Extra[0].Text),
		[]uint32{6}, enc("tmp\n"), enc(in.Extra[1].Text), []uint32{6}, enc("filename\n"), core)
	got, err := infillPrompt(repo, gen, 1<<20)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("repo-level: %v, %v\nwant %v", got, err, want)
	}

	// Fitted: a context of 200 with 50 to answer leaves 150 — the
	// prefix's last 3·(150/4) = 111 tokens, the suffix's first
	// 150/4 − 2 − 1 = 34, and the other files' latest tokens in what is
	// left.
	long := &api.Infill{Prefix: strings.Repeat("a = a + 1\n", 200), Suffix: strings.Repeat("b = b * 2\n", 200), Extra: in.Extra}
	gen = &api.Generation{Prompt: "x", Infill: long, MaxTokens: 50}
	got, err = infillPrompt(repo, gen, 200)
	if err != nil {
		t.Fatal(err)
	}
	pre, suf := enc(long.Prefix), enc(long.Suffix)
	core = slices.Concat([]uint32{1}, pre[len(pre)-111:], enc("x"), []uint32{3}, suf[:34], []uint32{2})
	if len(got) != 150 || !slices.Equal(got[len(got)-len(core):], core) {
		t.Errorf("fitted to 200: %d tokens, ends %v\nwant %v", len(got), got[max(0, len(got)-len(core)):], core)
	}
	extra := slices.Concat([]uint32{5}, enc("myproject\n"), []uint32{6}, enc("util.py\n"), enc(in.Extra[0].Text),
		[]uint32{6}, enc("tmp\n"), enc(in.Extra[1].Text), []uint32{6}, enc("filename\n"))
	if n := 150 - len(core); !slices.Equal(got[:n], extra[len(extra)-n:]) {
		t.Errorf("the other files' text kept is not their last %d tokens: %v", n, got[:n])
	}
	// A middle too long for the context is refused.
	gen = &api.Generation{Prompt: strings.Repeat("y = y - 1\n", 100), Infill: long, MaxTokens: math.MaxInt32}
	var tooLong *promptTooLongError
	if _, err := infillPrompt(repo, gen, 200); !errors.As(err, &tooLong) {
		t.Errorf("a long middle: %v", err)
	}
	if _, err := infillPrompt(testVocab(t, "llama-spm"), &api.Generation{Infill: in}, 1<<20); !errors.Is(err, errNoFIM) {
		t.Errorf("a vocabulary without FIM tokens: %v", err)
	}
}

// TestInfillServed: POST /infill is served by a model with FIM tokens
// (a fixture on StarCoder's vocabulary) in /completion's shape, its
// prompt the infill's (tokens_evaluated counts it), and replays, found
// by its input_prefix whether /completion is named or none; the built-in
// model, which has no FIM tokens, refuses it, and so does a grant.
func TestInfillServed(t *testing.T) {
	path, tok := coderFixture(t)
	n, _ := startNode(t, Config{Models: []string{path, fortunesPath(t)}})
	body := `{"model":"coder","input_prefix":"def add(a, b):\n    ","input_suffix":"\n\nprint(add(1, 2))","prompt":"return",` +
		`"input_extra":[{"filename":"util.py","text":"def sub(a, b):\n    return a - b\n"}],"n_predict":4,"cache_prompt":true}`
	var got struct {
		Content         string          `json:"content"`
		TokensPredicted int             `json:"tokens_predicted"`
		TokensEvaluated int             `json:"tokens_evaluated"`
		Energy          json.RawMessage `json:"energy"`
	}
	postJSON(t, n, "/infill", body, &got)
	want, err := infillPrompt(tok, &api.Generation{Prompt: "return", MaxTokens: 4, Infill: &api.Infill{
		Prefix: "def add(a, b):\n    ", Suffix: "\n\nprint(add(1, 2))", Extra: []api.InfillChunk{{Filename: "util.py", Text: "def sub(a, b):\n    return a - b\n"}}}}, 1<<20)
	if err != nil || got.TokensEvaluated != len(want) || got.TokensPredicted < 1 || got.Energy == nil {
		t.Fatalf("answer %q, %d predicted, %d evaluated; the infill prompt is %d tokens (%v)", got.Content, got.TokensPredicted, got.TokensEvaluated, len(want), err)
	}
	for _, endpoint := range []string{"", `,"endpoint":"/completion"`, `,"endpoint":"/infill"`} {
		replay := `{"request":` + body + `,"energy":` + string(got.Energy) + endpoint + `}`
		if status, res, raw := replayRaw(t, n, replay); status != 200 || res.Verdict != api.VerdictVerified {
			t.Errorf("replay%s: %d %s", endpoint, status, raw)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"model":"` + fortunesModel + `","input_prefix":"a","input_suffix":"b"}`, "no fill-in-the-middle tokens"},
		{`{"model":"coder","input_prefix":"a","input_suffix":"b","jcp_presentation":{"grant":"x"}}`, "an infill is not served on a request that rides on a grant"},
	} {
		code, v := answerOf(t, n, "/infill", tc.body)
		if code != 400 || !strings.Contains(fmt.Sprint(v), tc.want) {
			t.Errorf("%s: %d %v", tc.body, code, v)
		}
	}
}
