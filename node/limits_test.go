package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/hw/hwtest"
	"github.com/meshnode/meshnode/hw/meters"
	"github.com/meshnode/meshnode/node/engine"
	"github.com/meshnode/meshnode/node/receipt"
	"github.com/meshnode/meshnode/node/steward/grant"
)

// stepModel serves its model's engine so that every token produced costs
// one step on the meter's clock: the clock moves on by step before each
// token is emitted, and the estimator bills the span by that clock.
type stepModel struct {
	localModel
	clock *hwtest.Clock
	step  time.Duration
}

func (m stepModel) Engine() engine.Engine { return stepEngine{m.localModel.Engine(), m.clock, m.step} }

type stepEngine struct {
	engine.Engine
	clock *hwtest.Clock
	step  time.Duration
}

func (e stepEngine) Serve(ctx context.Context, req receipt.ServeRequest, prompt []uint32, emit func(uint32) error) (engine.Outcome, error) {
	return e.Engine.Serve(ctx, req, prompt, func(tok uint32) error {
		e.clock.Advance(e.step)
		return emit(tok)
	})
}

// stepUJ is what one token costs on a startSteppingNode node: the
// estimator's 10 W for 1 ms, ten times the reference model's modelled
// 1000 µJ.
const stepUJ = 10_000

// startSteppingNode starts the reference-engine node with a meter on
// which every token produced costs stepUJ, whatever the machine's speed.
func startSteppingNode(t *testing.T) *Node {
	t.Helper()
	clock := hwtest.NewClock(time.Unix(1_800_000_000, 0))
	n, _ := startNodeWith(t, Config{Models: []string{ReferenceModel}}, func(n *Node) {
		n.meterConfig = meters.Config{Meter: "estimator", EstimatorWatts: 10, Clock: clock}
		n.wrapModel = func(m localModel) localModel { return stepModel{m, clock, time.Millisecond} }
	})
	return n
}

// answerOf posts body and decodes the JSON answer.
func answerOf(t *testing.T, n *Node, path, body string) (int, map[string]any) {
	t.Helper()
	resp := post(t, n, path, body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: status %d, body %.300s", path, resp.StatusCode, b)
	}
	return resp.StatusCode, v
}

// journalDebits is every debit the node's steward journaled, in µJ.
func journalDebits(t *testing.T, n *Node) []uint64 {
	t.Helper()
	f, err := os.Open(filepath.Join(n.cfg.StateDir, "journal", "steward.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			Entry struct {
				Debited *struct {
					EstimatedUJ uint64  `json:"estimated_uj"`
					MeasuredUJ  *uint64 `json:"measured_uj"`
				} `json:"debited"`
			} `json:"entry"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		if d := rec.Entry.Debited; d != nil {
			uj := d.EstimatedUJ
			if d.MeasuredUJ != nil {
				uj = *d.MeasuredUJ
			}
			out = append(out, uj)
		}
	}
	return out
}

// TestAttackGrantOverspend reproduces both findings of the grant budget
// being overspent, over the whole node with a grant:
//
//   - A body whose metadata.prompt_tokens says "1" declares an estimate
//     its real prompt is hundreds of times over. It was admitted on that
//     figure and served; the router now prices the node's own count of
//     the prompt, so it is refused (422) before any work, and the refusal
//     shows the count priced.
//   - An honest request, admitted on the router's modelled estimate, whose
//     metered energy would have run to many times its ceiling (every token
//     here costs ten times the model's figure), is stopped before the step
//     that would pass its ceiling: the answer is 200 with finish_reason
//     "joule_ceiling", and the grant is debited the metered energy, at most
//     the ceiling and one step.
func TestAttackGrantOverspend(t *testing.T) {
	n := startSteppingNode(t)
	caller, chain := issueGrant(t, n)
	present := func(body string) string {
		t.Helper()
		out, _, err := grant.PresentBody([]byte(body), chain, caller, nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}

	// The reference model reads a byte as a token, at a modelled 1000
	// µJ each: this prompt is over 500 tokens, about 520000 µJ with its 8
	// answer tokens, against a declared 9000.
	lying := fmt.Sprintf(`{"model":"mesh-reference","max_tokens":8,"messages":[{"role":"user","content":%q}],
		"metadata":{"prompt_tokens":"1","joule_ceiling_uj":"100000"}}`, strings.Repeat("a", 500))
	code, v := answerOf(t, n, "/v1/chat/completions", present(lying))
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("a request declaring 1 prompt token for 500: %d %v, want 422 no_admissible_backend", code, v)
	}
	e := v["error"].(map[string]any)
	details, _ := e["details"].([]any)
	if e["code"] != "no_admissible_backend" || len(details) != 1 || details[0].(map[string]any)["prompt_tokens"].(float64) < 500 ||
		!strings.Contains(e["message"].(string), "prompt tokens counted, 1 declared") {
		t.Fatalf("refusal %v, want the candidate priced on the prompt as counted", e)
	}
	if d := journalDebits(t, n); len(d) != 0 {
		t.Fatalf("the refused request was debited %v", d)
	}

	// Honest: "user: hi\nassistant:" is 19 tokens, so the router plans
	// 1000 × (19 + 32) = 51000 µJ; each token really costs 10000.
	const ceiling = 60_000
	honest := `{"model":"mesh-reference","max_tokens":32,"messages":[{"role":"user","content":"hi"}],
		"metadata":{"joule_ceiling_uj":"60000"}}`
	code, v = answerOf(t, n, "/v1/chat/completions", present(honest))
	if code != http.StatusOK {
		t.Fatalf("honest granted request: %d %v", code, v)
	}
	choice := v["choices"].([]any)[0].(map[string]any)
	rec := v["usage"].(map[string]any)["energy"].(map[string]any)["receipt"].(map[string]any)
	debits := journalDebits(t, n)
	if len(debits) != 1 || debits[0] > ceiling+stepUJ || float64(debits[0]) != rec["estimated_uj"].(float64) {
		t.Fatalf("debited %v µJ (receipt %v): want the metered energy, at most the ceiling %d and one step %d", debits, rec["estimated_uj"], ceiling, stepUJ)
	}
	if choice["finish_reason"] != "joule_ceiling" || rec["grant_id"] != chain.Leaf().ID.String() {
		t.Fatalf("finish_reason %v, receipt %v; want joule_ceiling on the grant", choice["finish_reason"], rec)
	}
	tokens := v["usage"].(map[string]any)["completion_tokens"].(float64)
	if tokens < 1 || tokens >= 32 || rec["tokens_out"].(float64) != tokens {
		t.Fatalf("%v tokens answered, receipt tokens_out %v; want a cut answer the receipt counts exactly", tokens, rec["tokens_out"])
	}
}

// TestJouleCeilingUngranted: a request without a grant is held to its own
// metadata.joule_ceiling_uj the same way, and a streamed answer ends with
// finish_reason "joule_ceiling" and its usage.
func TestJouleCeilingUngranted(t *testing.T) {
	n := startSteppingNode(t)
	resp := post(t, n, "/v1/chat/completions", `{"model":"mesh-reference","stream":true,"stream_options":{"include_usage":true},
		"max_tokens":32,"messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":"60000"}}`)
	defer resp.Body.Close()
	var finish string
	var usage struct {
		CompletionTokens int `json:"completion_tokens"`
		Energy           struct {
			Receipt struct {
				EstimatedUJ uint64 `json:"estimated_uj"`
				TokensOut   int    `json:"tokens_out"`
			} `json:"receipt"`
		} `json:"energy"`
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		if len(chunk.Choices) == 1 && chunk.Choices[0].FinishReason != nil {
			finish = *chunk.Choices[0].FinishReason
		}
		if len(chunk.Usage) > 0 && string(chunk.Usage) != "null" {
			if err := json.Unmarshal(chunk.Usage, &usage); err != nil {
				t.Fatal(err)
			}
		}
	}
	if finish != "joule_ceiling" || usage.CompletionTokens == 0 || usage.CompletionTokens >= 32 ||
		usage.Energy.Receipt.TokensOut != usage.CompletionTokens || usage.Energy.Receipt.EstimatedUJ > 60_000+stepUJ {
		t.Fatalf("finish %q, usage %+v; want joule_ceiling, a cut answer, at most the ceiling and one step", finish, usage)
	}
}

// TestAttackHugePrompt: a 4 MiB prompt to the built-in model is answered
// 400 context_length_exceeded from its length alone, before the model's
// tokenizer runs: what refusing it allocates is a small multiple of the
// body (it was 1.4 GB when the prompt was tokenized whole), and none of it
// stays. A prompt under the length bound but over the context is refused
// while it is tokenized, once its tokens pass the context.
func TestAttackHugePrompt(t *testing.T) {
	t.Setenv("MESHNODE_DEFAULT_MODEL", fortunesPath(t))
	n, _ := startNode(t, Config{})
	ctxLen := n.models.all()[0].m.ContextLength()
	refuse := func(path, body string) (allocated, retained int64) {
		t.Helper()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, v := answerOf(t, n, path, body)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if code != http.StatusBadRequest || v["error"].(map[string]any)["code"] != "context_length_exceeded" {
			t.Fatalf("%s: %d %v, want 400 context_length_exceeded", path, code, v)
		}
		return int64(after.TotalAlloc - before.TotalAlloc), int64(after.HeapAlloc) - int64(before.HeapAlloc)
	}
	huge := hugePromptBody()
	for _, tc := range []struct{ path, body string }{
		{"/v1/chat/completions", huge},
		{"/v1/completions", strings.Replace(strings.Replace(huge, `"messages":[{"role":"user","content":`, `"prompt":`, 1), `"}]}`, `"}`, 1)},
	} {
		allocated, retained := refuse(tc.path, tc.body)
		t.Logf("%s: refusing %d bytes allocated %d MiB, retained %d KiB", tc.path, len(tc.body), allocated>>20, retained>>10)
		if allocated > 64<<20 || retained > 8<<20 {
			t.Errorf("%s: refusing a 4 MiB prompt allocated %d MiB and kept %d MiB; want at most 64 and 8", tc.path, allocated>>20, retained>>20)
		}
	}

	// One letter and a space per token: about two bytes a token, far under
	// the longest token's length, so only tokenizing finds it too long.
	words := strings.Repeat("a ", ctxLen+ctxLen/2)
	code, v := answerOf(t, n, "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, fortunesModel, words))
	e, _ := v["error"].(map[string]any)
	if code != http.StatusBadRequest || e["code"] != "context_length_exceeded" ||
		!strings.Contains(e["message"].(string), fmt.Sprintf("at least %d tokens", ctxLen)) {
		t.Fatalf("a prompt of %d one-letter words for a context of %d: %d %v", ctxLen+ctxLen/2, ctxLen, code, v)
	}
	// And the model still answers.
	if text, _ := generate(t, n, "/v1/completions", `{"model":"`+fortunesModel+`","prompt":"A man walks into a bar","max_tokens":4}`); text == "" {
		t.Fatal("no answer after the refusals")
	}
}

// TestDefaultCeilingAdmitsLargeModels: a request that names no joule
// ceiling gets steward.joule_ceiling_uj's default, a runaway stop, which
// admits what a node serves: the built-in model priced as a 4-bit 70B
// model (40 J a token by the derived figure, a nJ per file byte) answers a
// default chat and one bounded only by its context (max_tokens -1, as
// llama-server's web UI sends it). The default of 1 kJ refused both.
func TestDefaultCeilingAdmitsLargeModels(t *testing.T) {
	n, _ := startNode(t, Config{Model: []ModelConfig{{Path: fortunesPath(t), UJPerToken: 40_000_000}}})
	for _, extra := range []string{"", `,"max_tokens":-1`} {
		code, v := answerOf(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","messages":[{"role":"user","content":"Tell me a fortune."}]`+extra+`}`)
		if code != http.StatusOK {
			t.Errorf("a chat%s on a model priced at 40 J a token: %d %v", extra, code, v)
		}
	}
	// A request's own ceiling still binds.
	code, v := answerOf(t, n, "/v1/chat/completions", `{"model":"`+fortunesModel+`","messages":[{"role":"user","content":"hi"}],"metadata":{"joule_ceiling_uj":"1000000000"}}`)
	if e, _ := v["error"].(map[string]any); code != http.StatusUnprocessableEntity || e["code"] != "no_admissible_backend" {
		t.Errorf("a 1 kJ ceiling on a model priced at 40 J a token: %d %v, want 422", code, v)
	}
}
