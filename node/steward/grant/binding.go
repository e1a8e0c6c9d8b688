package grant

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/meshnode/meshnode/node/receipt"
)

// The OpenAI-compatible binding (mesh-spec §2.3). A request rides on a
// grant by carrying its presentation in the body field jcp_presentation.
// The presentation is signed for a request id, so the request a granted
// body is served as is derived from the body alone, by
// [GrantedServeRequest], which a caller runs before it signs and the
// node runs before it serves.

// PresentationField is the body field that carries a presentation.
const PresentationField = "jcp_presentation"

// DefaultGrantedMaxTokens is the output ceiling of a granted request whose
// body names none. It is part of the derivation, not a server setting, so
// that it cannot enter the request id unseen.
const DefaultGrantedMaxTokens = 256

// MaxBody bounds a body the derivation reads.
const MaxBody = 8 << 20

// MaxRepeatPenalty is the largest repeat_penalty a body may ask for, the
// node's API's bound.
const MaxRepeatPenalty = 10

// ErrNoCeiling: a granted body must name metadata.joule_ceiling_uj (§2.3).
var ErrNoCeiling = fmt.Errorf("%w: a granted request must name metadata.joule_ceiling_uj", ErrMalformed)

// grantedBody is what the derivation reads of a chat completions,
// completions or responses body; every other field is ignored.
type grantedBody struct {
	Messages            json.RawMessage            `json:"messages"`
	Prompt              json.RawMessage            `json:"prompt"`
	Input               json.RawMessage            `json:"input"`
	Instructions        *string                    `json:"instructions"`
	MaxCompletionTokens *int64                     `json:"max_completion_tokens"`
	MaxTokens           *int64                     `json:"max_tokens"`
	MaxOutputTokens     *int64                     `json:"max_output_tokens"`
	Temperature         *float64                   `json:"temperature"`
	TopP                *float64                   `json:"top_p"`
	Seed                *json.Number               `json:"seed"`
	Stop                json.RawMessage            `json:"stop"`
	PresencePenalty     *float64                   `json:"presence_penalty"`
	FrequencyPenalty    *float64                   `json:"frequency_penalty"`
	TopK                *int64                     `json:"top_k"`
	MinP                *float64                   `json:"min_p"`
	RepeatPenalty       *float64                   `json:"repeat_penalty"`
	Metadata            map[string]json.RawMessage `json:"metadata"`
}

// message is a chat message in the prompt's canonical form.
type message struct {
	Role    string `cbor:"role"`
	Content string `cbor:"content"`
}

// GrantedServeRequest is the binding's granted_serve_request: the mesh/1
// request a granted body is served as, derived from the body alone.
//
//   - prompt_hash: for "messages" (chat completions), or "input" with
//     optional "instructions" (responses, instructions first as a system
//     message, a string input as one user message), BLAKE3-256 of the
//     canonical det-CBOR array of {"content", "role"} maps, content parts
//     joined as text; for "prompt" (completions, a string or an array of
//     one string), BLAKE3-256 of its UTF-8 bytes.
//   - prompt_tokens: metadata.prompt_tokens when the body names it, else
//     the body's estimate: its prompt text's UTF-8 bytes / 4, rounded up.
//     The server's tokenizer count never replaces it.
//   - max_tokens: max_completion_tokens, else max_tokens, else
//     max_output_tokens, else DefaultGrantedMaxTokens.
//   - fidelity_floor: metadata.fidelity_floor, else F0.
//   - joule_ceiling_uj: metadata.joule_ceiling_uj, required.
//   - sampling: as the node builds it, except that no seed is drawn: a
//     temperature above 0 (in millionths) with top_p below 1, top_k, min_p
//     and seed when given; presence, frequency and repeat penalties (a
//     repeat penalty of 1 is none); stop strings.
//
// Metadata values are strings or numbers, as the binding accepts them.
func GrantedServeRequest(body []byte) (receipt.ServeRequest, error) {
	var req receipt.ServeRequest
	if len(body) > MaxBody {
		return req, fmt.Errorf("%w: body is %d bytes, limit %d", ErrMalformed, len(body), MaxBody)
	}
	var b grantedBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&b); err != nil {
		return req, fmt.Errorf("%w: body: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, fmt.Errorf("%w: body: trailing data after the JSON object", ErrMalformed)
	}
	hash, textBytes, err := b.prompt()
	if err != nil {
		return req, err
	}
	req.PromptHash = hash
	req.PromptTokens = uint32(min((textBytes+3)/4, math.MaxUint32))
	if v, ok, err := b.meta("prompt_tokens", math.MaxUint32); err != nil {
		return req, err
	} else if ok {
		req.PromptTokens = uint32(v)
	}
	req.MaxTokens = DefaultGrantedMaxTokens
	for _, f := range []struct {
		name string
		v    *int64
	}{{"max_completion_tokens", b.MaxCompletionTokens}, {"max_tokens", b.MaxTokens}, {"max_output_tokens", b.MaxOutputTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 || *f.v > math.MaxUint32 {
			return req, fmt.Errorf("%w: %s must be 1 … %d, got %d", ErrMalformed, f.name, uint32(math.MaxUint32), *f.v)
		}
		req.MaxTokens = uint32(*f.v)
		break
	}
	if v, ok, err := b.meta("fidelity_floor", uint64(receipt.F4)); err != nil {
		return req, err
	} else if ok {
		req.FidelityFloor = receipt.Fidelity(v)
	}
	v, ok, err := b.meta("joule_ceiling_uj", math.MaxUint64)
	if err != nil {
		return req, err
	}
	if !ok {
		return req, ErrNoCeiling
	}
	req.JouleCeilingUJ = v
	if req.Sampling, err = b.sampling(); err != nil {
		return req, err
	}
	if err := req.Validate(); err != nil {
		return req, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return req, nil
}

// prompt returns the prompt's content address and how many bytes of text
// it holds.
func (b *grantedBody) prompt() (receipt.ContentID, int, error) {
	var none receipt.ContentID
	present := func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
	}
	var msgs []message
	switch {
	case present(b.Messages):
		if present(b.Prompt) || present(b.Input) {
			return none, 0, fmt.Errorf("%w: body has messages and prompt or input", ErrMalformed)
		}
		var err error
		if msgs, err = parseMessages(b.Messages, "messages", false); err != nil {
			return none, 0, err
		}
	case present(b.Input):
		if present(b.Prompt) {
			return none, 0, fmt.Errorf("%w: body has both input and prompt", ErrMalformed)
		}
		if b.Instructions != nil && *b.Instructions != "" {
			msgs = append(msgs, message{Role: "system", Content: *b.Instructions})
		}
		var text string
		if err := json.Unmarshal(b.Input, &text); err == nil {
			msgs = append(msgs, message{Role: "user", Content: text})
		} else {
			in, err := parseMessages(b.Input, "input", true)
			if err != nil {
				return none, 0, err
			}
			msgs = append(msgs, in...)
		}
	case present(b.Prompt):
		var text string
		if err := json.Unmarshal(b.Prompt, &text); err != nil {
			var many []string
			if err := json.Unmarshal(b.Prompt, &many); err != nil || len(many) != 1 {
				return none, 0, fmt.Errorf("%w: prompt must be a string or an array of one string", ErrMalformed)
			}
			text = many[0]
		}
		return receipt.PromptHash([]byte(text)), len(text), nil
	default:
		return none, 0, fmt.Errorf("%w: body has no messages, input or prompt", ErrMalformed)
	}
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	enc, err := receipt.MarshalCanonical(msgs)
	if err != nil {
		return none, 0, fmt.Errorf("%w: messages: %v", ErrMalformed, err)
	}
	return receipt.PromptHash(enc), n, nil
}

var knownRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// parseMessages reads an array of messages, each content a string, null
// or an array of text parts. Responses input items may carry type
// "message".
func parseMessages(raw json.RawMessage, field string, typed bool) ([]message, error) {
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return nil, fmt.Errorf("%w: %s must be a non-empty array of messages", ErrMalformed, field)
	}
	out := make([]message, len(items))
	for i, it := range items {
		if it.Type != "" && (!typed || it.Type != "message") {
			return nil, fmt.Errorf("%w: %s[%d] has type %q", ErrMalformed, field, i, it.Type)
		}
		if !knownRoles[it.Role] {
			return nil, fmt.Errorf("%w: %s[%d].role %q is not a known role", ErrMalformed, field, i, it.Role)
		}
		text, err := contentText(it.Content)
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d].content: %v", ErrMalformed, field, i, err)
		}
		out[i] = message{Role: it.Role, Content: text}
	}
	return out, nil
}

// contentText flattens a message content to its text.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("must be a string or an array of content parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			if p.Text == nil {
				return "", fmt.Errorf("part %d is a text part without text", i)
			}
			sb.WriteString(*p.Text)
		default:
			return "", fmt.Errorf("part %d has type %q; only text parts are served", i, p.Type)
		}
	}
	return sb.String(), nil
}

// meta reads metadata.key as an unsigned integer of at most limit, given
// as a JSON string or number.
func (b *grantedBody) meta(key string, limit uint64) (uint64, bool, error) {
	raw, ok := b.Metadata[key]
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return 0, false, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		text = string(bytes.TrimSpace(raw))
	}
	v, err := strconv.ParseUint(strings.TrimSpace(text), 10, 64)
	if err != nil || v > limit {
		return 0, false, fmt.Errorf("%w: metadata.%s must be an integer 0 … %d", ErrMalformed, key, limit)
	}
	return v, true, nil
}

// sampling builds the request's sampling block as the node does, drawing
// nothing.
func (b *grantedBody) sampling() (*receipt.Sampling, error) {
	e6 := func(name string, v *float64, lo, hi float64) (float64, error) {
		if v == nil {
			return 0, nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return 0, fmt.Errorf("%w: %s must be between %v and %v", ErrMalformed, name, lo, hi)
		}
		return math.Round(*v * 1e6), nil
	}
	sp := &receipt.Sampling{}
	pp, err := e6("presence_penalty", b.PresencePenalty, -2, 2)
	if err != nil {
		return nil, err
	}
	fp, err := e6("frequency_penalty", b.FrequencyPenalty, -2, 2)
	if err != nil {
		return nil, err
	}
	sp.PresencePenaltyE6, sp.FrequencyPenaltyE6 = int32(pp), int32(fp)
	rp, err := e6("repeat_penalty", b.RepeatPenalty, 0, MaxRepeatPenalty)
	if err != nil {
		return nil, err
	}
	if rp != 1e6 {
		sp.RepeatPenaltyE6 = uint32(rp)
	}
	if sp.Stop, err = stops(b.Stop); err != nil {
		return nil, err
	}
	t, err := e6("temperature", b.Temperature, 0, 2)
	if err != nil {
		return nil, err
	}
	if t > 0 {
		sp.TemperatureE6 = uint32(t)
		if b.TopP != nil {
			if math.IsNaN(*b.TopP) || *b.TopP <= 0 || *b.TopP > 1 {
				return nil, fmt.Errorf("%w: top_p must be in (0, 1]", ErrMalformed)
			}
			if *b.TopP < 1 {
				sp.TopPE6 = uint32(math.Round(*b.TopP * 1e6))
			}
		}
		if k := b.TopK; k != nil {
			if *k < 0 || *k > math.MaxInt32 {
				return nil, fmt.Errorf("%w: top_k must be between 0 and %d", ErrMalformed, math.MaxInt32)
			}
			sp.TopK = uint32(*k)
		}
		mp, err := e6("min_p", b.MinP, 0, 1)
		if err != nil {
			return nil, err
		}
		sp.MinPE6 = uint32(mp)
		if b.Seed != nil {
			seed, err := parseSeed(*b.Seed)
			if err != nil {
				return nil, err
			}
			sp.Seed = &seed
		}
	}
	if sp.IsZero() {
		return nil, nil
	}
	return sp, nil
}

// parseSeed accepts any integer that fits 64 bits; a negative one is taken
// as its two's complement, as the node takes it.
func parseSeed(n json.Number) (uint64, error) {
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u, nil
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return uint64(i), nil
	}
	return 0, fmt.Errorf("%w: seed must be an integer, got %s", ErrMalformed, n)
}

// stops reads stop: a string or an array of strings, empty ones dropped.
func stops(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("%w: stop must be a string or an array of strings", ErrMalformed)
	}
	var out []string
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// BodyPresentation returns the body's jcp_presentation, or nil when the
// body carries none (absent or null).
func BodyPresentation(body []byte) (*Presentation, error) {
	var b struct {
		P json.RawMessage `json:"jcp_presentation"`
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("%w: body is %d bytes, limit %d", ErrMalformed, len(body), MaxBody)
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrMalformed, err)
	}
	raw := bytes.TrimSpace(b.P)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	return ParsePresentation(raw)
}
