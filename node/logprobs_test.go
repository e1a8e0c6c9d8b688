package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/chat"
	"github.com/meshnode/meshnode/gguf/cpu"
	"github.com/meshnode/meshnode/gguf/model"
	"github.com/meshnode/meshnode/gguf/model/modeltest"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
)

// logprobTolerance bounds the difference between a served log-probability
// and the reference's: both take the same model's f32 logits (the serve's
// from the engine's batched steps, the reference's from a plain session,
// one token at a time) and sum in float64, so they differ by the logits'
// rounding at most.
const logprobTolerance = 1e-4

// referenceLogprobs decodes n tokens greedily after the prompt's tokens on the fortunes
// model's own session, one token at a time, and returns each token with
// its log-probability and the top alternatives', computed here from the
// logits as the textbook softmax: ln(e^l / Σ e^l), the sum over the
// vocabulary sorted ascending (the small terms first).
func referenceLogprobs(t *testing.T, in []uint32, n, top int) (ids []uint32, lps []float64, tops [][]uint32, topLps [][]float64) {
	t.Helper()
	be := cpu.New(cpu.Options{})
	defer be.Close()
	f, m := modeltest.Load(t, fortunesPath(t), be)
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(model.SessionOptions{Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logits, err := s.Eval(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		exps := make([]float64, len(logits))
		for i, l := range logits {
			exps[i] = math.Exp(float64(l))
		}
		sorted := append([]float64(nil), exps...)
		slices.Sort(sorted)
		var z float64
		for _, e := range sorted {
			z += e
		}
		// The argmax, the lowest id on a tie; then the next likeliest.
		order := make([]uint32, 0, top+1)
		used := map[uint32]bool{}
		for len(order) < max(top, 1) {
			best := -1
			for i, l := range logits {
				if !used[uint32(i)] && (best < 0 || l > logits[best]) {
					best = i
				}
			}
			used[uint32(best)] = true
			order = append(order, uint32(best))
		}
		next := order[0]
		ids = append(ids, next)
		lps = append(lps, math.Log(exps[next]/z))
		var tl []float64
		for _, id := range order[:top] {
			tl = append(tl, math.Log(exps[id]/z))
		}
		tops, topLps = append(tops, order[:top]), append(topLps, tl)
		if tok.IsEOG(next) {
			break
		}
		if logits, err = s.Eval(context.Background(), []uint32{next}); err != nil {
			t.Fatal(err)
		}
	}
	return ids, lps, tops, topLps
}

type chatLogprobItem struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

func intsToBytes(v []int) []byte {
	b := make([]byte, len(v))
	for i, c := range v {
		b[i] = byte(c)
	}
	return b
}

// TestLogprobsAgainstReference: the log-probabilities greedy generations
// report on the fortunes model are the reference's (its own session's
// logits, softmaxed here) within logprobTolerance, token for token, with
// the same top alternatives; the chosen token heads them; the tokens'
// bytes make the text. Served with prompt lookup speculating and
// without it, as completions, chat completions and a streamed chat, they
// agree: speculation reports the target's rows. Windows are priced by
// the files: the load-time timings of a machine busy with other
// packages' tests (make race) priced every window out.
func TestLogprobsAgainstReference(t *testing.T) {
	cfg := Config{Model: []ModelConfig{{Path: fortunesPath(t), Draft: DraftLookup, DraftPrices: DraftPricesFiles}}}
	n, _ := startNode(t, cfg)
	const prompt = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat. The cat"
	const maxTokens, top = 16, 5
	f, err := gguf.Open(fortunesPath(t))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.FromGGUF(f.Metadata)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	piece := func(id uint32) []byte { p, _ := tok.Piece(id, true); return []byte(p) }
	rendered, err := tmpl.Apply([]chat.Message{{Role: "user", Content: prompt}}, true)
	if err != nil {
		t.Fatal(err)
	}

	type reference struct {
		ids    []uint32
		lps    []float64
		tops   [][]uint32
		topLps [][]float64
	}
	refOf := func(in []uint32) reference {
		var r reference
		r.ids, r.lps, r.tops, r.topLps = referenceLogprobs(t, in, maxTokens, top)
		if tok.IsEOG(r.ids[len(r.ids)-1]) {
			r.ids = r.ids[:len(r.ids)-1] // the end token is not emitted
		}
		return r
	}
	rawRef := refOf(tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true}))
	chatRef := refOf(tok.Encode(rendered, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}))

	check := func(t *testing.T, what string, ref reference, text string, items []chatLogprobItem) {
		t.Helper()
		if len(items) != len(ref.ids) {
			t.Fatalf("%s: %d tokens with logprobs, the reference decoded %d", what, len(items), len(ref.ids))
		}
		var all []byte
		for i, it := range items {
			b := intsToBytes(it.Bytes)
			all = append(all, b...)
			if !bytes.Equal(b, piece(ref.ids[i])) {
				t.Fatalf("%s: token %d is %q, the reference's %q", what, i, b, piece(ref.ids[i]))
			}
			if math.Abs(it.Logprob-ref.lps[i]) > logprobTolerance {
				t.Fatalf("%s: token %d logprob %v, reference %v", what, i, it.Logprob, ref.lps[i])
			}
			if len(it.TopLogprobs) != top || it.TopLogprobs[0].Logprob != it.Logprob || !bytes.Equal(intsToBytes(it.TopLogprobs[0].Bytes), b) {
				t.Fatalf("%s: token %d: the greedy pick does not head its %d alternatives: %+v", what, i, top, it.TopLogprobs)
			}
			for j, a := range it.TopLogprobs {
				if !bytes.Equal(intsToBytes(a.Bytes), piece(ref.tops[i][j])) || math.Abs(a.Logprob-ref.topLps[i][j]) > logprobTolerance {
					t.Fatalf("%s: token %d alternative %d is %q %v, the reference's %q %v", what, i, j, intsToBytes(a.Bytes), a.Logprob, piece(ref.tops[i][j]), ref.topLps[i][j])
				}
			}
		}
		if string(all) != text {
			t.Fatalf("%s: the tokens' bytes make %q, the text is %q", what, all, text)
		}
	}

	speculated := 0
	for _, spec := range []bool{true, false} {
		what := fmt.Sprintf("completions, speculative %v", spec)
		body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"prompt":%q,"logprobs":%d,"speculative":%v}`, fortunesModel, maxTokens, prompt, top, spec)
		var c struct {
			Choices []struct {
				Text     string `json:"text"`
				Logprobs struct {
					Tokens        []string             `json:"tokens"`
					TokenLogprobs []float64            `json:"token_logprobs"`
					TopLogprobs   []map[string]float64 `json:"top_logprobs"`
					TextOffset    []int                `json:"text_offset"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				Energy json.RawMessage `json:"energy"`
			} `json:"usage"`
		}
		postJSON(t, n, "/v1/completions", body, &c)
		l := c.Choices[0].Logprobs
		if len(l.Tokens) != len(rawRef.ids) || len(l.TokenLogprobs) != len(l.Tokens) || len(l.TopLogprobs) != len(l.Tokens) || len(l.TextOffset) != len(l.Tokens) {
			t.Fatalf("%s: %d tokens (reference %d), lists of %d, %d, %d", what, len(l.Tokens), len(rawRef.ids), len(l.TokenLogprobs), len(l.TopLogprobs), len(l.TextOffset))
		}
		offset := len(prompt) // ASCII: characters are bytes
		for i, lp := range l.TokenLogprobs {
			if l.Tokens[i] != string(piece(rawRef.ids[i])) || math.Abs(lp-rawRef.lps[i]) > logprobTolerance {
				t.Fatalf("%s: token %d %q %v, reference %q %v", what, i, l.Tokens[i], lp, piece(rawRef.ids[i]), rawRef.lps[i])
			}
			if alts := l.TopLogprobs[i]; len(alts) != top || alts[l.Tokens[i]] != lp {
				t.Fatalf("%s: token %d: alternatives %v lack the greedy pick %q", what, i, alts, l.Tokens[i])
			}
			if l.TextOffset[i] != offset {
				t.Fatalf("%s: token %d text_offset %d, want %d", what, i, l.TextOffset[i], offset)
			}
			offset += len([]rune(l.Tokens[i]))
		}
		if strings.Join(l.Tokens, "") != c.Choices[0].Text {
			t.Fatalf("%s: tokens %q do not make the text %q", what, l.Tokens, c.Choices[0].Text)
		}
		p, _ := specCounts(t, c.Usage.Energy)
		speculated += p

		what = fmt.Sprintf("chat, speculative %v", spec)
		body = fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}],"logprobs":true,"top_logprobs":%d,"speculative":%v}`,
			fortunesModel, maxTokens, prompt, top, spec)
		var cc struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				Logprobs struct {
					Content []chatLogprobItem `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		postJSON(t, n, "/v1/chat/completions", body, &cc)
		check(t, what, chatRef, cc.Choices[0].Message.Content, cc.Choices[0].Logprobs.Content)
	}
	if speculated == 0 {
		t.Fatal("no serve speculated: the speculative path went untested")
	}

	// Streamed: each chunk carries its own tokens' logprobs.
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":%q}],"logprobs":true,"top_logprobs":%d,"stream":true}`,
		fortunesModel, maxTokens, prompt, top)
	resp := post(t, n, "/v1/chat/completions", body)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var items []chatLogprobItem
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Logprobs *struct {
					Content []chatLogprobItem `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
			if c.Logprobs != nil {
				if c.Delta.Content != "" && len(c.Logprobs.Content) == 0 {
					t.Fatalf("a chunk with text and no tokens: %s", data)
				}
				items = append(items, c.Logprobs.Content...)
			}
		}
	}
	check(t, "streamed chat", chatRef, text.String(), items)
}

// TestLogprobsReplay: asking for logprobs leaves the request's identity
// alone: a serve that asked replays verified, and its receipt is the one
// the same request without them gets (the same request id).
func TestLogprobsReplay(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	const plain = `{"model":"` + fortunesModel + `","max_tokens":6,"temperature":0.7,"seed":4,"messages":[{"role":"user","content":"Love is"}]}`
	with := strings.Replace(plain, `"max_tokens"`, `"logprobs":true,"top_logprobs":3,"max_tokens"`, 1)
	requestID := func(energy json.RawMessage) string {
		var e struct {
			Receipt struct {
				RequestID string `json:"request_id"`
			} `json:"receipt"`
		}
		if err := json.Unmarshal(energy, &e); err != nil || e.Receipt.RequestID == "" {
			t.Fatalf("no request id in %s: %v", energy, err)
		}
		return e.Receipt.RequestID
	}
	textWith, energyWith := generate(t, n, "/v1/chat/completions", with)
	textPlain, energyPlain := generate(t, n, "/v1/chat/completions", plain)
	if textWith != textPlain || requestID(energyWith) != requestID(energyPlain) {
		t.Fatalf("with logprobs %q (request %s), without %q (request %s)", textWith, requestID(energyWith), textPlain, requestID(energyPlain))
	}
	body, _ := json.Marshal(map[string]any{"request": json.RawMessage(with), "energy": energyWith})
	if status, res, raw := replayRaw(t, n, string(body)); status != http.StatusOK || res.Verdict != api.VerdictVerified {
		t.Fatalf("replay of a serve that asked for logprobs: %d %s", status, raw)
	}
}

// TestLogprobsRefused: a model whose engine has no distribution (the
// reference engine) refuses logprobs with a 400 naming the field.
func TestLogprobsRefused(t *testing.T) {
	n, _ := startNode(t, Config{Models: []string{ReferenceModel}})
	code, v := answerOf(t, n, "/v1/chat/completions", `{"model":"mesh-reference","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"logprobs":true}`)
	e, _ := v["error"].(map[string]any)
	if code != http.StatusBadRequest || e["param"] != "logprobs" || !strings.Contains(fmt.Sprint(e["message"]), "cannot report log-probabilities") {
		t.Fatalf("logprobs on the reference engine: %d %v", code, v)
	}
}

// postJSON posts body to n's path and decodes a 200's body into v.
func postJSON(t *testing.T, n *Node, path, body string, v any) {
	t.Helper()
	resp := post(t, n, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v: %s", path, err, b)
	}
}
