package api

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/node/receipt"
)

// FuzzParseRequest: whatever a client sends, the generation parsers (and
// the token count's) answer with a Generation or a 400 *Error, and never
// panic.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],` +
			`"temperature":0.5,"top_p":0.9,"seed":-1,"stop":["\n"],"max_completion_tokens":10,"stream":true,` +
			`"stream_options":{"include_usage":true},"metadata":{"fidelity_floor":"2","joule_ceiling_uj":5000}}`,
		`{"model":"tiny","prompt":["once"],"max_tokens":3,"stop":"x","n":1,"presence_penalty":-2,"frequency_penalty":2}`,
		`{"model":"tiny","prompt":"once","temperature":0.8,"top_k":40,"min_p":0.05,"repeat_penalty":1.1,"logprobs":3}`,
		`{"model":"tiny","prompt":"once","logit_bias":{"50256":-100,"7":2.5,"0":100}}`,
		`{"model":"tiny","prediction":{"type":"content","content":[{"type":"text","text":"def f():\n  return 1\n"}]},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"tiny","prompt":[[1,319,767]],"max_tokens":2}`, `{"model":"tiny","prompt":[1,2]}`,
		`{"model":"tiny","prompt":["a",[1,2],"b"],"n":3,"seed":9}`, `{"model":"tiny","n":4,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":20,"user":"u","store":false,"tools":[]}`,
		`{"model":"tiny","input":"x","include":["message.output_text.logprobs"],"top_logprobs":2,"service_tier":"flex"}`,
		`{"model":"tiny","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],` +
			`"instructions":"be kind","max_output_tokens":4,"jcp_presentation":{"grant":"x"}}`,
		`{"model":"tiny","input":"hello"}`,
		`{"model":"tiny","messages":[{"role":"user","content":"x"}],"repeat_penalty":1.1,"repeat_last_n":64,"max_tokens":-1,"stream":true,` +
			`"return_progress":true,"timings_per_token":true,"typ_p":1,"dry_multiplier":0,"dry_base":1.75,"xtc_probability":0,"backend_sampling":false}`,
		`{"model":"tiny","prompt":"x","temperature":0.8,"typical_p":0.9,"top_n_sigma":1.5,"xtc_probability":0.5,"xtc_threshold":0.1,` +
			`"dynatemp_range":0.3,"dynatemp_exponent":2,"min_keep":3,"samplers":"edskypmxt","dry_multiplier":0.8,"dry_base":1.75,` +
			`"dry_allowed_length":2,"dry_penalty_last_n":-1,"dry_sequence_breakers":["\n","Bob:"]}`,
		`{"model":"tiny","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}],"stream":true,"sse_ping_interval":1,` +
			`"reasoning_control":true,"continue_final_message":true,"add_generation_prompt":false}`,
		`{"model":"tiny","input":"x","reasoning":{"effort":"low"}}`, `{"model":"tiny","reasoning_effort":"high","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"tiny","chat_template_kwargs":{"enable_thinking":false},"messages":[{"role":"user","content":"x"}]}`, `{"model":"tiny","stream":false,"think":false,"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"tiny","input":[{"role":"user","content":"w?"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"c1","output":"ok"},{"type":"reasoning"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"},"strict":false}],` +
			`"tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false}`,
		`{"model":"tiny","max_tokens":5,"system":[{"type":"text","text":"be brief"}],"stop_sequences":["END"],"temperature":1,"top_k":5,` +
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","is_error":true},{"type":"text","text":"go on"}]},` +
			`{"role":"assistant","content":"Sure"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],` +
			`"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},"thinking":{"type":"disabled"},"metadata":{"user_id":"u"}}`,
		`{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},` +
			`{"role":"tool","tool_name":"f","content":"ok"}],"options":{"temperature":0.7,"num_predict":-1,"num_ctx":64,"stop":["x"],"mirostat":1,"mirostat_tau":3},` +
			`"format":{"type":"object"},"keep_alive":-1,"think":false,"stream":false,"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"tiny","prompt":"hi","system":"s","raw":false,"suffix":"","options":{"seed":3}}`,
		`{"model":"tiny","prompt":[1,2],"n_predict":-1,"seed":-1,"logit_bias":[[5,1.5],[9,false]],"cache_prompt":true,"id_slot":-1,` +
			`"grammar":"root ::= [a-zé]+ (\" \" root)?","stop":["\n"],"mirostat":0,"stream":true}`,
		`{"model":"tiny","prompt":"x","json_schema":{"type":"integer"},"top_k":0,"n_probs":0}`,
		`{"model":"tiny","prompt":"x","temperature":0.8,"mirostat":2,"mirostat_tau":4.5,"mirostat_eta":0.2,"mirostat_mode":2}`,
		`{"model":"tiny","prompt":"x","temperature":0.8,"min_p":0.05,"adaptive_target":0.4,"adaptive_decay":0.8,"samplers":["min_p","temperature","adaptive_p"]}`,
		`{"model":"tiny","prompt":"x","guided_regex":"[a-z]+(\\d{2})?","structured_outputs":{"choice":["a"]},"guided_json":"{}","guided_decoding_backend":"auto"}`,
		`{"model":"tiny","prompt":"x","ignore_eos":true,"min_tokens":3,"min_length":3,"ban_eos_token":true,"return_tokens":true,"n_probs":2,"post_sampling_probs":true}`,
		`{"model":"tiny","input_prefix":"def f():","input_suffix":"\n","prompt":"  ","input_extra":[{"filename":"a.py","text":"x"},{"text":"y"}],"n_predict":8}`,
		`{"model":"tiny","prompt":"x","grammar":"root ::= \"yes\" | \"no\"","messages":null}`,
		// llama.vim's and llama.vscode's, which name no model.
		`{"id_slot":0,"input_prefix":"","input_suffix":"","input_extra":[{"text":"x","time":1,"filename":"a"}],"prompt":"","n_predict":0,` +
			`"temperature":0.0,"samplers":[],"stream":false,"cache_prompt":true,"t_max_prompt_ms":1,"t_max_predict_ms":1,"response_fields":[""]}`,
		`{"id_slot":0,"input_prefix":"a","input_suffix":"b","prompt":"  ","n_predict":128,"n_cmpl":3,"n_indent":4,"top_k":40,"top_p":0.9,` +
			`"samplers":["top_k","top_p","infill"],"t_max_prompt_ms":500,"t_max_predict_ms":250,"n_probs":2,"response_fields":["content","timings/prompt_n"]}`,
		`{"id_slot":0,"messages":[{"role":"user","content":"x"}],"min_p":0.1,"temperature":0.1,"samplers":"mt","stream":true,"cache_prompt":true}`,
		`{"messages":[{"role":"user","content":"x"}],"thinking_budget_tokens":512,"reasoning_format":"deepseek-legacy","max_tokens":1024}`,
		`{"model":"tiny","prompt":["a","b"],"n":2,"id_slot":-1,"samplers":["top_k","temperature"],"n_predict":0,"cache_prompt":true,"response_fields":["choices"]}`,
		// SillyTavern's other names.
		`{"prompt":"x","temperature":1,"dynamic_temperature":true,"dynatemp_low":0.5,"dynatemp_high":1.5,"dynatemp_range":0.5,` +
			`"custom_token_bans":"5,7","logit_bias":[[5,false],[7,false]],"stopping_strings":["a","b","c","d","e"],"rep_pen":1.1,` +
			`"rep_pen_range":64,"truncation_length":100,"num_ctx":200,"max_new_tokens":5,"n":1,"logprobs":2,"samplers":["Top-K","nucleus","adaptive_p"]}`,
		``, `null`, `[]`, `{"model":1}`, `{"model":"m"} {}`,
	} {
		f.Add([]byte(seed))
	}
	for _, file := range []string{"llamacpp.json", "ollama.json"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "sillytavern", file))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for name, parse := range map[string]func([]byte) (*Generation, error){
			"chat":        func(b []byte) (*Generation, error) { g, _, err := parseChat(b); return g, err },
			"completions": func(b []byte) (*Generation, error) { g, _, err := parseCompletion(b); return g, err },
			"responses":   func(b []byte) (*Generation, error) { g, _, err := parseResponses(b); return g, err },
			"messages":    func(b []byte) (*Generation, error) { g, _, err := parseMessages(b); return g, err },
			"count":       func(b []byte) (*Generation, error) { g, _, err := parseCountTokens(b); return g, err },
			"ollama chat": func(b []byte) (*Generation, error) { g, _, err := parseOllamaChat(b); return g, err },
			"ollama gen":  func(b []byte) (*Generation, error) { g, _, err := parseOllamaGenerate(b); return g, err },
			"llama.cpp":   func(b []byte) (*Generation, error) { g, _, err := parseLlamaCompletion(b); return g, err },
			"infill":      func(b []byte) (*Generation, error) { g, _, err := parseInfill(b); return g, err },
		} {
			g, err := parse(body)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
					t.Fatalf("%s: %v is not a 400", name, err)
				}
				continue
			}
			// llama-server's clients name no model on chat and its own
			// endpoints (the server's one model stands in).
			if g == nil || g.Model == "" && name != "chat" && name != "llama.cpp" && name != "infill" {
				t.Fatalf("%s: accepted %q as %+v", name, body, g)
			}
			if g.MinIndent < 0 || g.MinIndent > receipt.MaxIndent {
				t.Fatalf("%s: accepted n_indent %d", name, g.MinIndent)
			}
			sampling := receipt.ServeRequest{Sampling: &receipt.Sampling{Samplers: g.Samplers, MinIndent: uint32(g.MinIndent)}}
			if err := sampling.Validate(); err != nil {
				t.Fatalf("%s: accepted samplers %q a request cannot carry: %v", name, g.Samplers, err)
			}
			if g.TopLogprobs < 0 || g.TopLogprobs > maxTopLogprobs || g.PromptOnly && g.MaxTokens != 0 {
				t.Fatalf("%s: accepted top logprobs %d, max tokens %d (prompt only %v)", name, g.TopLogprobs, g.MaxTokens, g.PromptOnly)
			}
			if len(g.PromptIDs) > maxPromptIDs || g.PromptIDs != nil && (len(g.PromptIDs) == 0 || g.Prompt != "") {
				t.Fatalf("%s: accepted a prompt of %d ids beside %q", name, len(g.PromptIDs), g.Prompt)
			}
			if cs := g.Choices(); len(cs) == 0 || len(cs) > maxChoices || len(cs) > 1 && g.Presentation != nil {
				t.Fatalf("%s: accepted %d choices", name, len(cs))
			}
			if g.Prefill != "" && g.Messages == nil {
				t.Fatalf("%s: accepted a prefill with no conversation", name)
			}
			if in := g.Infill; in != nil && len(in.Extra) > maxInfillChunks {
				t.Fatalf("%s: accepted %d infill chunks", name, len(in.Extra))
			}
			if len(g.Stop) > receipt.MaxStops || g.ContextLimit < 0 {
				t.Fatalf("%s: accepted %d stops, context limit %d", name, len(g.Stop), g.ContextLimit)
			}
			if len(g.LogitBias) > maxLogitBias {
				t.Fatalf("%s: accepted %d logit biases", name, len(g.LogitBias))
			}
			for id, b := range g.LogitBias {
				if !(b >= -maxLogitBiasValue && b <= maxLogitBiasValue) {
					t.Fatalf("%s: accepted a bias of %v for token %d", name, b, id)
				}
			}
		}
	})
}

// FuzzParseReplay: whatever a client sends to /v1/mesh/replay, the parser
// answers with a replay holding a generation and an energy object, or a
// 400 *Error, and never panics.
func FuzzParseReplay(f *testing.F) {
	for _, seed := range []string{
		`{"request":{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3},"energy":{"receipt":{},"envelope_hex":"d284"}}`,
		`{"request":{"model":"tiny","prompt":"once","seed":7,"temperature":0.5},"energy":{"envelope_hex":"00"},"output":[1,2,3]}`,
		`{"request":{"model":"tiny","input":"hello"},"energy":{}}`,
		`{"request":{"model":"tiny","prompt":["a","b"],"n":2},"energy":{},"choice":3}`,
		`{"request":{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"It"}]},"energy":{},"endpoint":"/v1/messages"}`,
		`{"request":{"model":"tiny","max_tokens":2,"stop_sequences":["x"],"messages":[{"role":"user","content":"hi"}]},"energy":{}}`,
		`{"request":{"model":"tiny","prompt":"x","messages":[]},"energy":{}}`,
		`{"request":{"messages":[{"role":"user"}]},"energY":{}}`,
		``, `null`, `[]`, `{"request":null,"energy":null}`, `{"request":{},"energy":{}} {}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseReplay(body)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("%v is not a 400", err)
			}
			return
		}
		if r.Generation == nil || len(r.Energy) == 0 || r.Energy[0] != '{' || len(r.Generation.Choices()) != 1 {
			t.Fatalf("accepted %q as %+v", body, r)
		}
		// A request may name no model where its endpoint's clients send
		// none (chat, /completion, /infill: the handler stands the node's
		// one model in); one that names a model keeps it.
		var named struct {
			Model string `json:"model"`
		}
		if json.Unmarshal(r.Generation.Body, &named) == nil && named.Model != "" && r.Generation.Model == "" {
			t.Fatalf("accepted %q naming model %q as a request for none", body, named.Model)
		}
	})
}

// FuzzParseEmbedding: whatever a client sends to /v1/embeddings, the
// parser answers with inputs that are all text or all token ids, none
// empty, within the bounds, or a 400 *Error, and never panics.
func FuzzParseEmbedding(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tiny","input":"hello","encoding_format":"base64","dimensions":8,"user":"u"}`,
		`{"model":"tiny","input":["a","b"],"encoding_format":"float"}`,
		`{"model":"tiny","input":[1,2,3]}`,
		`{"model":"tiny","input":[[1],[2,3]]}`,
		`{"model":"tiny","input":["a",[1]]}`,
		`{"model":"tiny","input":[4294967296]}`,
		`{"model":"tiny","input":"x","logit_bias":{"1":2}}`,
		``, `null`, `[]`, `{"model":"tiny","input":[]}`, `{"model":"tiny","input":[[]]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, _, err := parseEmbedding(body)
		if err != nil {
			var he *Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("%v is not a 400", err)
			}
			return
		}
		if e.Model == "" || len(e.Inputs) == 0 || len(e.Inputs) > maxEmbedInputs {
			t.Fatalf("accepted %q as %+v", body, e)
		}
		for i, in := range e.Inputs {
			if in.IsTokens != e.Inputs[0].IsTokens || in.IsTokens && (len(in.Tokens) == 0 || len(in.Tokens) > maxEmbedTokens) || !in.IsTokens && in.Text == "" {
				t.Fatalf("accepted %q with input %d %+v", body, i, in)
			}
		}
	})
}

// FuzzParseLlamaEmbedding: whatever a client sends to llama-server's
// /embedding, the parser answers with inputs within their bounds and a
// norm of at least -1, or a 400 *Error, and never panics; the norms it
// accepts scale any vector to finite numbers.
func FuzzParseLlamaEmbedding(f *testing.F) {
	for _, seed := range []string{
		`{"content":"hello","embd_normalize":0}`, `{"model":"tiny","input":["a","b"],"embd_normalize":-1}`,
		`{"content":[1,2,3],"embd_normalize":5,"encoding_format":"float"}`, `{"content":[[1],[2,3]]}`,
		`{"content":"a","input":"b"}`, `{"embd_normalize":-7,"content":"x"}`, ``, `null`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, norm, err := parseLlamaEmbedding(body, "/embedding")
		if err != nil {
			var he *Error
			if !errors.As(err, &he) || he.Status != http.StatusBadRequest {
				t.Fatalf("%v is not a 400", err)
			}
			return
		}
		if norm < -1 || len(e.Inputs) == 0 || len(e.Inputs) > maxEmbedInputs || e.Unnormalized != (norm != euclidean) {
			t.Fatalf("accepted %q as %+v, norm %d", body, e, norm)
		}
		v := []float32{3, -4, 1e-30, 65504}
		normalizeEmbedding(v, norm)
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("norm %d scaled a vector to %v", norm, v)
			}
		}
	})
}

// FuzzParseTokenize: whatever a client sends to /tokenize or
// /detokenize, the parsers answer with what they read or a 400 *Error,
// and never panic; what they accept is within their bounds.
func FuzzParseTokenize(f *testing.F) {
	for _, seed := range []string{
		`{"model":"tiny","content":"Love is","add_special":true,"parse_special":false,"with_pieces":true}`,
		`{"content":["a",7,"b"]}`,
		`{"model":"tiny","tokens":[1,319,767]}`,
		`{"tokens":[]}`, `{"content":[4294967296]}`, `{"tokens":[-1]}`, ``, `null`, `[]`,
		`{"prompt":"test","add_special_tokens":false}`, `{"prompt":"a","content":"b"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		is400 := func(err error) {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest {
				t.Fatalf("%v is not a 400", err)
			}
		}
		if _, parts, err := parseTokenize(body); err != nil {
			is400(err)
		} else if len(parts) > maxTokenizeParts {
			t.Fatalf("accepted content of %d parts", len(parts))
		}
		if _, ids, err := parseDetokenize(body); err != nil {
			is400(err)
		} else if len(ids) > maxDetokenize {
			t.Fatalf("accepted %d ids", len(ids))
		}
	})
}
