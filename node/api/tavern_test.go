package api

import (
	"errors"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// tavernBody is the body SillyTavern's text completion, set to
// llama.cpp, posts to /completion with its default settings (a seed and
// two stopping strings set): testdata/sillytavern/llamacpp.json, as its
// createTextGenGenerationData builds it.
func tavernBody(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../testdata/sillytavern/llamacpp.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// withField is body with field's value replaced by (or, absent, the
// field added as) value.
func withField(t *testing.T, body, field, value string) string {
	t.Helper()
	key := `"` + field + `": `
	i := strings.Index(body, key)
	if i < 0 {
		return strings.Replace(body, "{", "{"+key+value+",", 1)
	}
	j := i + len(key)
	depth := 0
	for k := j; k < len(body); k++ {
		switch body[k] {
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case ',', '\n':
			if depth == 0 {
				return body[:j] + value + body[k:]
			}
		}
		if depth < 0 {
			return body[:j] + value + body[k:]
		}
	}
	t.Fatalf("field %s has no end", field)
	return ""
}

// TestTavernBody: SillyTavern's body is served as the llama.cpp fields
// its names stand for say: the same generation as the body that sends
// each setting once under llama.cpp's name, with the context it fits to
// as the serve's bound.
func TestTavernBody(t *testing.T) {
	g, _, err := parseLlamaCompletion([]byte(tavernBody(t)))
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := parseLlamaCompletion([]byte(`{"prompt":"A fortune for the day:\n","n_predict":24,"temperature":0.7,"top_p":0.5,"top_k":40,"min_p":0,
		"seed":7,"repeat_penalty":1.2,"repeat_last_n":0,"stop":["\nUser:","\nYou:"],"stream":true,"typical_p":1,"n_cmpl":1,
		"samplers":["penalties","dry","top_n_sigma","top_k","typ_p","top_p","min_p","xtc","temperature"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if g.ContextLimit != 4096 {
		t.Errorf("context limit %d, want truncation_length's 4096", g.ContextLimit)
	}
	g.Body, want.Body, g.ContextLimit = nil, nil, 0
	if !reflect.DeepEqual(g, want) {
		t.Errorf("SillyTavern's body read as\n%+v\nwant\n%+v", g, want)
	}
}

// TestTavernRefusals: a sampler or option of another backend that a
// preset turns on is refused by its name, as is a setting sent under two
// names with two values.
func TestTavernRefusals(t *testing.T) {
	body := tavernBody(t)
	for _, tc := range []struct{ field, value string }{
		{"top_a", "0.2"}, {"tfs", "0.95"}, {"epsilon_cutoff", "3"},
		{"smoothing_factor", "0.3"}, {"skew", "1"},
		{"banned_strings", `["ominous"]`}, {"guidance_scale", "1.5"}, {"add_bos_token", "false"},
		{"skip_special_tokens", "false"}, {"include_reasoning", "false"}, {"max_tokens_second", "5"}, {"rep_pen_slope", "0.5"},
		{"legacy_api", "true"}, {"num_beams", "2"}, {"tfs_z", "0.9"},
		// One setting, two values.
		{"max_new_tokens", "10"}, {"num_predict", "10"}, {"max_tokens", "10"}, {"stopping_strings", `["\nMe:"]`},
		{"rep_pen", "1.1"}, {"repetition_penalty", "1.1"}, {"rep_pen_range", "64"}, {"sampler_seed", "8"},
		{"typical", "0.9"}, {"nsigma", "1"}, {"grammar_string", `"root ::= \"a\""`}, {"mirostat_mode", "2"}, {"ban_eos_token", "true"}, {"min_length", "5"},
		// Out of range.
		{"truncation_length", "0"}, {"num_ctx", "-1"}, {"adaptive_target", "1.5"},
	} {
		_, _, err := parseLlamaCompletion([]byte(withField(t, body, tc.field, tc.value)))
		var e *Error
		if !errors.As(err, &e) || e.Param != tc.field {
			t.Errorf("%s %s: %v, want a refusal naming %s", tc.field, tc.value, err, tc.field)
		}
	}
}

// TestTavernAliases: each other name, sent alone, is read as the field
// it stands for: text-generation-webui's, KoboldAI's, Ollama's and
// llama-server's own.
func TestTavernAliases(t *testing.T) {
	for _, tc := range []struct {
		body string
		want func(g *Generation) bool
	}{
		{`"max_new_tokens":5`, func(g *Generation) bool { return g.MaxTokens == 5 }},
		{`"num_predict":5`, func(g *Generation) bool { return g.MaxTokens == 5 }},
		{`"max_tokens":5`, func(g *Generation) bool { return g.MaxTokens == 5 }},
		{`"max_completion_tokens":0`, func(g *Generation) bool { return g.PromptOnly }},
		{`"n":2,"temperature":0.5`, func(g *Generation) bool { return g.N == 2 }},
		{`"logprobs":3`, func(g *Generation) bool { return g.Logprobs && g.TopLogprobs == 3 }},
		{`"stopping_strings":["\nMe:"]`, func(g *Generation) bool { return slices.Equal(g.Stop, []string{"\nMe:"}) }},
		{`"rep_pen":1.1,"rep_pen_range":64`, func(g *Generation) bool { return g.RepeatPenalty == 1.1 && g.PenaltyLastN == 64 }},
		{`"repetition_penalty":1.1,"repetition_penalty_range":-1`, func(g *Generation) bool { return g.RepeatPenalty == 1.1 && g.PenaltyLastN == -1 }},
		{`"sampler_seed":9,"temperature":0.5`, func(g *Generation) bool { return g.Seed != nil && *g.Seed == 9 }},
		{`"typical":0.9,"temperature":0.5`, func(g *Generation) bool { return g.TypicalP == 0.9 }},
		{`"nsigma":1.5,"temperature":0.5`, func(g *Generation) bool { return g.TopNSigma == 1.5 }},
		{`"grammar_string":"root ::= \"a\""`, func(g *Generation) bool { return g.Grammar != nil }},
		{`"adaptive_target":0.3,"temperature":0.5,"samplers":["top_k","temperature","adaptive_p"]`, func(g *Generation) bool {
			return g.AdaptiveTarget != nil && *g.AdaptiveTarget == 0.3 && g.AdaptiveDecay == 0.9 && g.Samplers == "kt"
		}},
		{`"adaptive_target":0,"adaptive_decay":0.5,"temperature":0.5,"samplers":"atk"`, func(g *Generation) bool {
			return g.AdaptiveTarget != nil && *g.AdaptiveTarget == 0 && g.AdaptiveDecay == 0.5 && g.Samplers == "tk"
		}},
		{`"adaptive_target":-0.01,"adaptive_decay":5`, func(g *Generation) bool { return g.AdaptiveTarget == nil }},
		{`"ban_eos_token":true`, func(g *Generation) bool { return g.IgnoreEOS }},
		{`"min_length":4`, func(g *Generation) bool { return g.MinTokens == 4 }},
		{`"min_length":4,"min_tokens":4`, func(g *Generation) bool { return g.MinTokens == 4 }},
		{`"ban_eos_token":true,"ignore_eos":true`, func(g *Generation) bool { return g.IgnoreEOS }},
		{`"mirostat_mode":2,"temperature":0.5`, func(g *Generation) bool { return g.Mirostat == 2 && g.MirostatTau == 5 && g.MirostatEta == 0.1 }},
		{`"mirostat_mode":1,"mirostat":1,"mirostat_tau":3,"mirostat_eta":0.25,"temperature":0.5`, func(g *Generation) bool {
			return g.Mirostat == 1 && g.MirostatTau == 3 && g.MirostatEta == 0.25
		}},
		{`"truncation_length":100,"num_ctx":200`, func(g *Generation) bool { return g.ContextLimit == 100 }},
		{`"num_ctx":200`, func(g *Generation) bool { return g.ContextLimit == 200 }},
		// The same value under both names.
		{`"max_new_tokens":5,"n_predict":5,"max_tokens":5,"num_predict":5`, func(g *Generation) bool { return g.MaxTokens == 5 }},
		// Their off values, and SillyTavern's own routing.
		{`"mirostat_mode":0,"mirostat_tau":5,"tfs":1,"top_a":0,"adaptive_target":-1,"adaptive_decay":0.9,"api_type":"llamacpp","api_server":"http://127.0.0.1:8080","temperature_last":false,"do_sample":true`,
			func(g *Generation) bool { return g.MaxTokens == math.MaxInt32 }},
	} {
		g, _, err := parseLlamaCompletion([]byte(`{"prompt":"x",` + tc.body + `}`))
		if err != nil || !tc.want(g) {
			t.Errorf("%s: %+v, %v", tc.body, g, err)
		}
	}
}

// TestTavernDynamicTemperature: text-generation-webui's dynamic
// temperature, from dynatemp_low to dynatemp_high, is llama.cpp's
// temperature ± dynatemp_range; SillyTavern sends both, computed in
// float64, and a node refuses them where they differ.
func TestTavernDynamicTemperature(t *testing.T) {
	// SillyTavern's arithmetic for a range of 0.1 to 0.7, as JavaScript
	// does it: (0.1+0.7)/2 and (0.7-0.1)/2.
	lo, hi := 0.1, 0.7
	mid, half := (lo+hi)/2, (hi-lo)/2
	for _, tc := range []struct {
		body      string
		refused   string
		temp, rng float64
	}{
		{body: `"dynamic_temperature":true,"dynatemp_low":0.5,"dynatemp_high":1.5,"temperature":1,"dynatemp_range":0.5,"dynatemp_exponent":1`, temp: 1, rng: 0.5},
		{body: `"dynamic_temperature":true,"dynatemp_low":0.1,"dynatemp_high":0.7,"temperature":` + ftoa(mid) + `,"dynatemp_range":` + ftoa(half), temp: mid, rng: half},
		// Without llama.cpp's fields: the middle and half the span.
		{body: `"dynamic_temperature":true,"dynatemp_low":0.5,"dynatemp_high":1.5`, temp: 1, rng: 0.5},
		{body: `"dynamic_temperature":true,"dynatemp_low":0.5,"dynatemp_high":1.5,"temperature":0.9`, refused: "temperature"},
		{body: `"dynamic_temperature":true,"dynatemp_low":0.5,"dynatemp_high":1.5,"dynatemp_range":0.4`, refused: "dynatemp_range"},
		{body: `"dynamic_temperature":true,"dynatemp_low":1.5,"dynatemp_high":0.5`, refused: "dynamic_temperature"},
		{body: `"dynamic_temperature":true,"temperature":1`, refused: "dynamic_temperature"},
		{body: `"dynatemp_low":0.5,"dynatemp_high":1.5,"temperature":1`, refused: "dynatemp_low"},
		{body: `"dynamic_temperature":false,"temperature":1`, temp: 1},
	} {
		g, _, err := parseLlamaCompletion([]byte(`{"prompt":"x",` + tc.body + `}`))
		if tc.refused != "" {
			var e *Error
			if !errors.As(err, &e) || e.Param != tc.refused {
				t.Errorf("%s: %v, want a refusal naming %s", tc.body, err, tc.refused)
			}
			continue
		}
		if err != nil || g.Temperature == nil || *g.Temperature != tc.temp || g.DynaTempRange != tc.rng {
			t.Errorf("%s: %+v, %v; want temperature %v ± %v", tc.body, g, err, tc.temp, tc.rng)
		}
	}
}

func ftoa(f float64) string { return strings.TrimSpace(string(mustJSON(f))) }

// TestTavernTokenBans: custom_token_bans, which SillyTavern sends beside
// logit_bias's [id, false] pairs for the same tokens, is accepted where
// logit_bias bans each token it names, and refused naming one it does
// not.
func TestTavernTokenBans(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`"custom_token_bans":"5,7","logit_bias":[[5,false],[7,false]]`, true},
		{`"custom_token_bans":[5, 7],"logit_bias":[[5,false],[7,false],[9,false]]`, true},
		{`"custom_token_bans":"","logit_bias":[]`, true},
		{`"custom_token_bans":"5,8","logit_bias":[[5,false],[7,false]]`, false},
		{`"custom_token_bans":"5","logit_bias":[[5,-50]]`, false},
		{`"custom_token_bans":"five","logit_bias":[[5,false]]`, false},
		{`"custom_token_bans":{"5":true}`, false},
	} {
		_, _, err := parseLlamaCompletion([]byte(`{"prompt":"x",` + tc.body + `}`))
		var e *Error
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case !tc.ok && (!errors.As(err, &e) || e.Param != "custom_token_bans"):
			t.Errorf("%s: %v, want a refusal naming custom_token_bans", tc.body, err)
		}
	}
}

// TestSamplerNames: samplers takes llama.cpp's names as llama.cpp reads
// them (any case, kebab case, without underscores, its aliases, and
// typical_p, older releases' name); adaptive_p and tfs_z, whose options
// are off, run no filter.
func TestSamplerNames(t *testing.T) {
	for _, tc := range []struct {
		samplers, want string
	}{
		{`["Top-K","nucleus","temp"]`, "kpt"},
		{`["topk","typ","MIN_P","top-n-sigma"]`, "kyms"},
		{`["top_k","tfs_z","typical_p","top_p","min_p","temperature"]`, "kypmt"},
		{`["penalties","dry","top_n_sigma","top_k","typ_p","top_p","min_p","xtc","temperature","adaptive_p"]`, "edskypmxta"},
		{`"kpta"`, "kpta"},
		{`["adaptive-p","tfs_z"]`, "a"},
	} {
		order, given, err := llamaSamplers([]byte(tc.samplers))
		if err != nil || !given || order != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.samplers, order, err, tc.want)
		}
	}
	for _, bad := range []string{`["top_k","mirostat"]`, `["typ","typical_p"]`, `"kpk"`, `["adaptive-p","adaptivep"]`} {
		if order, _, err := llamaSamplers([]byte(bad)); err == nil {
			t.Errorf("%s: %q, want a refusal", bad, order)
		}
	}
}

// TestLlamaStops: llama.cpp's and Ollama's endpoints take as many stop
// sequences as a receipt holds (SillyTavern sends a chat's speakers),
// OpenAI's four.
func TestLlamaStops(t *testing.T) {
	stops := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = `"\nS` + strings.Repeat("x", i) + `:"`
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	if g, _, err := parseLlamaCompletion([]byte(`{"prompt":"x","stop":` + stops(16) + `}`)); err != nil || len(g.Stop) != 16 {
		t.Errorf("16 stops on /completion: %v", err)
	}
	if _, _, err := parseLlamaCompletion([]byte(`{"prompt":"x","stop":` + stops(17) + `}`)); err == nil {
		t.Error("17 stops on /completion: accepted")
	}
	var g Generation
	if err := (&ollamaCommon{Model: "m", Options: []byte(`{"stop":` + stops(16) + `}`)}).apply(&g); err != nil || len(g.Stop) != 16 {
		t.Errorf("16 stops in Ollama's options: %v", err)
	}
	if _, err := parseStop([]byte(stops(5)), maxStops); err == nil {
		t.Error("5 stops where OpenAI takes 4: accepted")
	}
}

// TestAdaptiveOrder: adaptive-p runs only where samplers lists
// adaptive_p, as in llama.cpp, whose default order does not: a target
// set where it would not run is refused, saying so.
func TestAdaptiveOrder(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`"temperature":0.5,"adaptive_target":0.3`, "llama.cpp's default samplers do not list it"},
		{`"temperature":0.5,"adaptive_target":0.3,"samplers":["top_k","temperature"]`, "samplers does not list it"},
		{`"adaptive_target":0.3,"samplers":["temperature","adaptive_p"]`, "greedy"},
	} {
		_, _, err := parseLlamaCompletion([]byte(`{"prompt":"x",` + tc.body + `}`))
		var e *Error
		if !errors.As(err, &e) || e.Param != "adaptive_target" || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %v, want a refusal naming adaptive_target saying %q", tc.body, err, tc.want)
		}
	}
}
