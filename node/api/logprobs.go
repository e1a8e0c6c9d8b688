package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Delta is one piece of a generation's output: the text, and the
// log-probabilities of the tokens it completes when the request asked for
// them. A piece may carry tokens and no text (a character split across
// tokens, held until its last byte) or text and no tokens.
type Delta struct {
	Text     string
	Logprobs []TokenLogprob
	// Tokens are the ids of the tokens made since the last delta, where
	// the request asked for them (Generation.ReturnTokens): the text may
	// lag them (a stop string's beginning is held back).
	Tokens []uint32
}

// TokenLogprob is one output token's log-probability under the model's
// distribution (docs/api.md, Logprobs), with its bytes and the likeliest
// tokens at its position.
type TokenLogprob struct {
	ID      uint32 // the token (llama.cpp's completion_probabilities name it)
	Bytes   []byte
	Logprob float64
	Top     []TopLogprob
	// Unscored: an echoed prompt's first token, which nothing precedes
	// (its log-probability and alternatives are null).
	Unscored bool
}

// TopLogprob is one of the likeliest tokens at a position.
type TopLogprob struct {
	ID      uint32
	Bytes   []byte
	Logprob float64
}

// Bounds on the number of alternatives, as OpenAI's.
const (
	maxTopLogprobs       = 20 // chat completions and responses: top_logprobs
	maxLegacyLogprobs    = 5  // completions: logprobs
	minReportableLogprob = -9999.0
)

// tokenText is a token's text as OpenAI shows it: the text itself when
// its bytes are UTF-8, else "bytes:" and each byte as \xNN (a piece of a
// character split across tokens); bytes carries the exact bytes either way.
func tokenText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var s bytes.Buffer
	s.WriteString("bytes:")
	for _, c := range b {
		fmt.Fprintf(&s, "\\x%02x", c)
	}
	return s.String()
}

// reportable clamps a log-probability to what JSON can carry: a token the
// model gives no mass at all (−Inf) reads as −9999, as OpenAI's do.
func reportable(lp float64) float64 {
	if math.IsNaN(lp) || lp < minReportableLogprob {
		return minReportableLogprob
	}
	return lp
}

// byteList is a token's bytes as OpenAI's JSON has them: a list of
// integers (never base64, which []byte would be).
func byteList(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// topItem is an alternative, which has no alternatives of its own.
type topItem struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// itemsOf renders tokens in the chat and responses shape.
func itemsOf(tokens []TokenLogprob) []logprobItemOut {
	out := make([]logprobItemOut, len(tokens))
	for i, t := range tokens {
		top := make([]topItem, len(t.Top))
		for j, a := range t.Top {
			top[j] = topItem{Token: tokenText(a.Bytes), Logprob: reportable(a.Logprob), Bytes: byteList(a.Bytes)}
		}
		out[i] = logprobItemOut{Token: tokenText(t.Bytes), Logprob: reportable(t.Logprob), Bytes: byteList(t.Bytes), TopLogprobs: top}
	}
	return out
}

// logprobItemOut is one token in the chat completions' and the
// responses' shape.
type logprobItemOut struct {
	Token       string    `json:"token"`
	Logprob     float64   `json:"logprob"`
	Bytes       []int     `json:"bytes"`
	TopLogprobs []topItem `json:"top_logprobs"`
}

// chatLogprobs is a chat choice's logprobs object.
type chatLogprobs struct {
	Content []logprobItemOut `json:"content"`
	Refusal []logprobItemOut `json:"refusal"`
}

// legacyLogprobs is a completions choice's logprobs object: parallel
// lists, the alternatives as objects from token text to log-probability,
// likeliest first (the sampled token among them, so up to logprobs+1).
type legacyLogprobs struct {
	Tokens        []string      `json:"tokens"`
	TokenLogprobs []*float64    `json:"token_logprobs"` // nil: an echoed prompt's first token, unscored
	TopLogprobs   []orderedLogp `json:"top_logprobs"`
	TextOffset    []int         `json:"text_offset"`
}

// orderedLogp is a JSON object from token text to log-probability that
// keeps its order (a Go map would sort the keys). A text that comes twice
// (two tokens with the same text) keeps its first, likelier, entry.
type orderedLogp []struct {
	text string
	lp   float64
}

func (o orderedLogp) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil // an unscored token's
	}
	b := []byte{'{'}
	for i, e := range o {
		if i > 0 {
			b = append(b, ',')
		}
		k, err := json.Marshal(e.text)
		if err != nil {
			return nil, err
		}
		b = append(b, k...)
		b = append(b, ':')
		b = strconv.AppendFloat(b, e.lp, 'g', -1, 64)
	}
	return append(b, '}'), nil
}

func (o orderedLogp) add(text string, lp float64) orderedLogp {
	for _, e := range o {
		if e.text == text {
			return o
		}
	}
	return append(o, struct {
		text string
		lp   float64
	}{text, lp})
}

// legacyOf renders tokens in the completions shape; offset is the
// text_offset of the first, in characters, and the offset after the last
// is returned. A character split across tokens counts at the token that
// ends it.
func legacyOf(tokens []TokenLogprob, top int, offset int, carry []byte) (*legacyLogprobs, int, []byte) {
	l := &legacyLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []orderedLogp{}, TextOffset: []int{}}
	for _, t := range tokens {
		text, lp := tokenText(t.Bytes), reportable(t.Logprob)
		l.Tokens = append(l.Tokens, text)
		l.TextOffset = append(l.TextOffset, offset)
		if t.Unscored {
			l.TokenLogprobs = append(l.TokenLogprobs, nil)
			l.TopLogprobs = append(l.TopLogprobs, nil)
		} else {
			l.TokenLogprobs = append(l.TokenLogprobs, &lp)
			var alts orderedLogp
			for _, a := range t.Top[:min(top, len(t.Top))] {
				alts = alts.add(tokenText(a.Bytes), reportable(a.Logprob))
			}
			l.TopLogprobs = append(l.TopLogprobs, alts.add(text, lp))
		}
		var n int
		n, carry = completeRunes(append(carry, t.Bytes...))
		offset += n
	}
	return l, offset, carry
}

// completeRunes counts the characters b holds whole (an invalid byte is
// one) and returns the incomplete character at its end, if any.
func completeRunes(b []byte) (int, []byte) {
	n := 0
	for len(b) > 0 && utf8.FullRune(b) {
		_, size := utf8.DecodeRune(b)
		b = b[size:]
		n++
	}
	return n, append([]byte(nil), b...)
}
