// Package toolcall finds the function calls in a model's output, in the
// format its chat template taught it, and turns them into OpenAI's
// tool_calls: whole (Parse) or, as the text streams in, as the deltas an
// OpenAI stream carries (Parser).
//
// The formats are those real models use:
//
//   - Llama3: Llama 3.x answers a call with a bare JSON object
//     {"name": ..., "parameters": {...}} (optionally after <|python_tag|>);
//     several may follow one another, separated by ";" or white space.
//   - Hermes: Hermes 2/3, Qwen2.5 and Qwen3 wrap each call in
//     <tool_call>{"name": ..., "arguments": {...}}</tool_call>.
//   - Mistral: [TOOL_CALLS] followed by a JSON array of
//     {"name", "arguments"} objects (Mistral v3, Nemo, Small 3.1), or by
//     name[ARGS]{...} (the newer tokenizers, with an optional
//     [CALL_ID]id before [ARGS]); each call may have its own [TOOL_CALLS].
//   - Granite: IBM Granite 3.x answers <|tool_call|> followed by a JSON
//     array of {"name", "arguments"} objects.
//   - Gemma4: Gemma 4 writes <|tool_call>call:NAME{key:value,…}<tool_call|>,
//     its arguments in Gemma's notation: bare keys, strings between
//     <|"|> markers, numbers, true, false, null, {…} and […].
//   - LFM2: Liquid's LFM2 and LFM2.5 write a Python list of calls with
//     keyword arguments between <|tool_call_start|> and <|tool_call_end|>
//     (pythonic.go).
//   - Harmony: gpt-oss addresses a message to functions.NAME on its
//     commentary channel, the arguments as its text; package harmony
//     parses those replies (channels and calls), not this package's
//     Parser; Grammar forces one such call (after an optional analysis
//     message).
//   - Generic: a template that has no tools, or whose format is none of
//     the above, gets chat's polyfill, which asks for {"tool_calls":
//     [{"name", "arguments"}]} or a single {"name", "arguments"} object as
//     the whole answer.
//
// Text around the calls is content. White space next to a call is not:
// it is held back until what follows shows whether a call comes.
package toolcall

import (
	"crypto/rand"
	"encoding/json"
	"strings"

	"github.com/meshnode/meshnode/gguf/chat"
)

// Format is a model's way of writing function calls.
type Format int

const (
	Generic Format = iota
	Llama3
	Hermes
	Mistral
	Granite
	Harmony
	Gemma4
	LFM2
)

func (f Format) String() string {
	switch f {
	case Llama3:
		return "llama3"
	case Hermes:
		return "hermes"
	case Mistral:
		return "mistral"
	case Granite:
		return "granite"
	case Harmony:
		return "harmony"
	case Gemma4:
		return "gemma4"
	case LFM2:
		return "lfm2"
	}
	return "generic"
}

// Markers are the texts that open a call in f. Where a vocabulary has one
// as a single control token, the detokenizer must render it (llama.cpp
// calls these preserved tokens), or the parser never sees it.
func (f Format) Markers() []string {
	switch f {
	case Llama3:
		return []string{"<|python_tag|>"}
	case Hermes:
		return []string{"<tool_call>", "</tool_call>"}
	case Mistral:
		return []string{"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}
	case Granite:
		return []string{"<|tool_call|>"}
	case Gemma4:
		return []string{gemmaOpen, gemmaClose, gemmaQuote}
	case LFM2:
		return []string{pyOpen, pyClose}
	}
	return nil
}

// Gemma 4's markers: a call's opening and closing tokens and its strings'
// delimiter.
const (
	gemmaOpen  = "<|tool_call>"
	gemmaClose = "<tool_call|>"
	gemmaQuote = `<|"|>`
)

// Detect picks the format a template's tool-call turns are written in,
// by the markers in its source; a template that does not take tools, or
// writes calls in none of the formats here, is Generic (and is rendered
// with chat's polyfill: chat.Input.Generic).
func Detect(t *chat.Template) Format {
	if !t.TakesTools() {
		return Generic
	}
	return DetectSource(t.Source())
}

// DetectSource is Detect on a template's text.
func DetectSource(src string) Format {
	switch {
	case strings.Contains(src, "<|channel|>") && strings.Contains(src, "functions."):
		return Harmony
	case strings.Contains(src, gemmaOpen+"call:"):
		return Gemma4
	case strings.Contains(src, pyOpen) || strings.Contains(src, "<|tool_list_start|>") || strings.Contains(src, "List of tools: ["):
		// LFM2's templates list the tools between <|tool_list_start|>
		// and <|tool_list_end|>, LFM2.5's after "List of tools: ", and
		// only some render past calls (llama.cpp detects them so).
		return LFM2
	case strings.Contains(src, "[TOOL_CALLS]"):
		return Mistral
	case strings.Contains(src, "<tool_call>"):
		return Hermes
	case strings.Contains(src, "<|tool_call|>"):
		return Granite
	case strings.Contains(src, "<|start_header_id|>") && (strings.Contains(src, `"parameters"`) || strings.Contains(src, "<|python_tag|>")):
		return Llama3
	}
	return Generic
}

// Call is one complete function call.
type Call struct {
	ID   string
	Name string
	// Arguments is the JSON text of the arguments: the model's own text
	// of the object, "{}" when it gave none.
	Arguments string
}

// NewID returns a fresh call id for f: Mistral's templates want nine
// alphanumerics (Nemo's insists on exactly nine), the others get OpenAI's
// "call_" and 24 of them.
func NewID(f Format) string {
	if f == Mistral {
		return randomAlnum(9)
	}
	return "call_" + randomAlnum(24)
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func randomAlnum(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// Parse splits a whole output into its content and its calls, with ids
// from NewID. It is the stream's result: Parse(text) equals what a Parser
// fed text in any pieces accumulates.
func Parse(f Format, text string) (content string, calls []Call) {
	return NewParser(f, nil).Parse(text)
}

// Event is one piece of a parsed stream: content text, or a tool-call
// delta.
type Event struct {
	Content string
	Call    *Delta
}

// Delta is a piece of one call, as OpenAI streams it: the call's first
// delta carries its Index, ID and Name (and possibly arguments); later
// ones carry more of the arguments text, to be appended.
type Delta struct {
	Index     int
	ID, Name  string
	Arguments string
}

// maxName bounds how far a Mistral call name is looked for before [ARGS]:
// past it, the text was not a call.
const maxName = 256

type state int

const (
	stText         state = iota
	stTopObj             // a JSON object at the start of the answer (Llama3, Generic)
	stTagObj             // after <tool_call>
	stClose              // after a call object: its closing tag, if any
	stMistral            // after [TOOL_CALLS]
	stGranite            // after <|tool_call|>
	stMistralName        // name[CALL_ID]id[ARGS]
	stRawArgs            // Mistral's arguments after [ARGS]
	stXML                // <function=name><parameter=k>v</parameter>...</function>
	stGemma              // after <|tool_call>: call:NAME{…} up to <tool_call|>
	stPython             // after <|tool_call_start|>: [NAME(k=v, …), …] up to <|tool_call_end|>
	stArray              // inside [ ... ] of call objects
	stWrapperClose       // the "}" after Generic's {"tool_calls": [...]
)

// Parser parses a stream of output text. It is not safe for concurrent
// use.
type Parser struct {
	f     Format
	newID func() string
	buf   string // text not yet consumed
	st    state
	next  state // where stArray goes after "]"

	sawText   bool   // non-space content was emitted
	pendingWS string // trailing white space of the content, held
	calls     int    // calls started
	afterCall bool   // no content since the last call

	// ParamType, when set, gives the JSON Schema type of a parameter of
	// a tool ("string", "integer", ...; "" when unknown), by which the
	// XML format's parameter texts become JSON values.
	ParamType func(tool, param string) string

	// the call being read
	name     string
	open     bool
	argsSent int  // bytes of raw arguments sent
	argsRaw  bool // the arguments stream as the model's raw text
	events   []Event
}

// NewParser returns a parser for f; newID gives each call its id (NewID
// for f when nil).
func NewParser(f Format, newID func() string) *Parser {
	if newID == nil {
		newID = func() string { return NewID(f) }
	}
	return &Parser{f: f, newID: newID}
}

// Parse feeds text and finishes the stream, and returns what the events
// accumulate to: the content and the calls. It is Parse with p's
// settings.
func (p *Parser) Parse(text string) (content string, calls []Call) {
	var b strings.Builder
	for _, e := range append(p.Feed(text), p.Finish()...) {
		if e.Call == nil {
			b.WriteString(e.Content)
			continue
		}
		if e.Call.Index == len(calls) {
			calls = append(calls, Call{ID: e.Call.ID, Name: e.Call.Name})
		}
		calls[e.Call.Index].Arguments += e.Call.Arguments
	}
	return b.String(), calls
}

// Calls is how many calls the stream has started.
func (p *Parser) Calls() int { return p.calls }

// Feed parses more text and returns what it completes; text that may
// still turn out to be part of a call is held back.
func (p *Parser) Feed(text string) []Event {
	p.buf += text
	p.run(false)
	return p.take()
}

// Finish ends the stream: what was held back is content, or the end of a
// call cut short (its arguments as far as they went).
func (p *Parser) Finish() []Event {
	p.run(true)
	if p.open {
		p.endCall()
	}
	if p.calls == 0 && p.pendingWS != "" {
		p.events = append(p.events, Event{Content: p.pendingWS})
	}
	p.pendingWS = ""
	return p.take()
}

func (p *Parser) take() []Event {
	evs := p.events
	p.events = nil
	return evs
}

// text emits content, holding its trailing white space, and dropping
// white space right after a call.
func (p *Parser) text(s string) {
	if s == "" {
		return
	}
	if p.afterCall {
		s = strings.TrimLeft(s, " \t\r\n")
		if s == "" {
			return
		}
		p.afterCall = false
	}
	body := strings.TrimRight(s, " \t\r\n")
	if body == "" {
		p.pendingWS += s
		return
	}
	p.events = append(p.events, Event{Content: p.pendingWS + body})
	p.pendingWS = s[len(body):]
	p.sawText = true
}

func (p *Parser) startCall(name string) {
	p.pendingWS, p.name = "", name
	p.open, p.argsSent, p.argsRaw = true, 0, false
	p.events = append(p.events, Event{Call: &Delta{Index: p.calls, ID: p.newID(), Name: name}})
	p.calls++
}

func (p *Parser) args(s string) {
	if s != "" {
		p.events = append(p.events, Event{Call: &Delta{Index: p.calls - 1, Arguments: s}})
	}
}

// streamArgs sends the new part of a call's raw arguments prefix.
func (p *Parser) streamArgs(raw string) {
	if !p.argsRaw {
		if raw == "" || raw[0] != '{' {
			return // a string or other value: sent whole at the end
		}
		p.argsRaw = true
	}
	if len(raw) > p.argsSent {
		p.args(raw[p.argsSent:])
		p.argsSent = len(raw)
	}
}

// finishArgs sends the rest of a complete call's arguments.
func (p *Parser) finishArgs(raw string, found bool) {
	switch {
	case p.argsRaw:
		p.args(raw[p.argsSent:])
	case !found || raw == "null":
		p.args("{}")
	case raw[0] == '"':
		var s string
		if json.Unmarshal([]byte(raw), &s) == nil {
			p.args(s)
		} else {
			p.args(raw)
		}
	default:
		p.args(raw)
	}
	p.open = false
	p.afterCall = true
}

// endCall ends a call cut short.
func (p *Parser) endCall() {
	p.open = false
	p.afterCall = true
}

func (p *Parser) run(final bool) {
	for {
		before, st := len(p.buf), p.st
		p.step(final)
		if len(p.buf) == before && p.st == st {
			return
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(s string) string { return strings.TrimLeft(s, " \t\r\n") }

// step makes one move from the current state; it leaves buf and the
// state unchanged when it needs more text.
func (p *Parser) step(final bool) {
	switch p.st {
	case stText:
		p.stepText(final)
	case stTopObj:
		p.stepObject(final, true, stText)
	case stTagObj:
		t := trimSpace(p.buf)
		if t == "" {
			if final {
				p.buf = ""
			}
			return
		}
		switch {
		case strings.HasPrefix(t, "<function="):
			p.buf, p.st = t, stXML
		case strings.HasPrefix("<function=", t) && !final:
			// an XML call on its way, or not
		case t[0] != '{':
			p.asText("<tool_call>")
		default:
			p.buf = t
			p.stepObject(final, false, stClose)
		}
	case stXML:
		p.stepXML(final)
	case stGemma:
		p.stepGemma(final)
	case stPython:
		p.stepPython(final)
	case stClose:
		t := trimSpace(p.buf)
		switch {
		case strings.HasPrefix(t, "</tool_call>"):
			p.buf, p.st = t[len("</tool_call>"):], stText
		case strings.HasPrefix("</tool_call>", t) && !final:
			// a closing tag on its way
		default:
			p.st = stText
			if final && strings.HasPrefix("</tool_call>", t) {
				p.buf = ""
			}
		}
	case stMistral:
		t := trimSpace(p.buf)
		switch {
		case t == "":
			if final {
				p.buf = ""
			}
		case t[0] == '[':
			p.buf, p.st, p.next = t[1:], stArray, stText
		default:
			p.buf, p.st = t, stMistralName
		}
	case stGranite:
		t := trimSpace(p.buf)
		switch {
		case t == "":
			if final {
				p.buf = ""
			}
		case t[0] == '[':
			p.buf, p.st, p.next = t[1:], stArray, stText
		default:
			p.asText("<|tool_call|>")
		}
	case stMistralName:
		p.stepMistralName(final)
	case stRawArgs:
		p.stepRawArgs(final)
	case stArray:
		t := trimSpace(p.buf)
		switch {
		case t == "":
			if final {
				p.buf = ""
			}
		case t[0] == ',':
			p.buf = t[1:]
		case t[0] == ']':
			p.buf, p.st = t[1:], p.next
		case t[0] == '{':
			p.buf = t
			p.stepObject(final, false, stArray)
		default:
			p.st = stText
		}
	case stWrapperClose:
		t := trimSpace(p.buf)
		switch {
		case t == "" && !final:
		case t != "" && t[0] == '}':
			p.buf, p.st = t[1:], stText
		default:
			p.buf, p.st = t, stText
		}
	}
}

// asText gives up on a call whose marker was consumed: the marker and the
// text after it are content.
func (p *Parser) asText(marker string) {
	p.text(marker)
	p.st = stText
	p.sawText = true
}

func (p *Parser) stepText(final bool) {
	if (p.f == Llama3 || p.f == Generic) && (!p.sawText || p.afterCall) {
		t := trimSpace(p.buf)
		switch {
		case t == "":
			if final {
				p.text(p.buf)
				p.buf = ""
			}
			return
		case t[0] == '{':
			p.text(p.buf[:len(p.buf)-len(t)])
			p.buf, p.st = t, stTopObj
			return
		case t[0] == ';' && p.afterCall:
			p.buf = t[1:]
			return
		}
		p.sawText = true
	}
	markers := p.openers()
	at, which := -1, ""
	for _, m := range markers {
		if i := strings.Index(p.buf, m); i >= 0 && (at < 0 || i < at) {
			at, which = i, m
		}
	}
	if at >= 0 {
		p.text(p.buf[:at])
		p.buf = p.buf[at+len(which):]
		switch which {
		case "<tool_call>":
			p.st = stTagObj
		case "[TOOL_CALLS]":
			p.st = stMistral
		case "<|tool_call|>":
			p.st = stGranite
		case "<|python_tag|>":
			p.st = stTopObj
		case gemmaOpen:
			p.st = stGemma
		case pyOpen:
			p.st = stPython
		}
		return
	}
	hold := 0
	if !final {
		hold = heldPrefix(p.buf, markers)
	}
	p.text(p.buf[:len(p.buf)-hold])
	p.buf = p.buf[len(p.buf)-hold:]
}

func (p *Parser) openers() []string {
	switch p.f {
	case Llama3:
		return []string{"<|python_tag|>"}
	case Hermes:
		return []string{"<tool_call>"}
	case Mistral:
		return []string{"[TOOL_CALLS]"}
	case Granite:
		return []string{"<|tool_call|>"}
	case Gemma4:
		return []string{gemmaOpen}
	case LFM2:
		return []string{pyOpen}
	}
	return nil
}

// heldPrefix is the length of the longest suffix of s that is a proper
// prefix of one of markers.
func heldPrefix(s string, markers []string) int {
	best := 0
	for _, m := range markers {
		for n := min(len(m)-1, len(s)); n > best; n-- {
			if strings.HasSuffix(s, m[:n]) {
				best = n
				break
			}
		}
	}
	return best
}

// stepObject reads a call object at the start of buf. top says it is a
// JSON answer that may turn out not to be a call (Llama3, Generic); then
// = where to go once the object is read.
func (p *Parser) stepObject(final, top bool, then state) {
	o := scanObject(p.buf, top)
	if top && p.f == Generic && o.wrapper >= 0 {
		// {"tool_calls": [ ... ]}
		p.buf, p.st, p.next = p.buf[o.wrapper:], stArray, stWrapperClose
		return
	}
	if o.bad && o.nameDone {
		// The call was named, so it stands (a stream has sent it): its
		// arguments go as far as they were well formed, and the rest is
		// content.
		if !p.open {
			p.startCall(o.name)
		}
		if o.argsStart >= 0 {
			end := o.badAt
			if o.argsEnd >= 0 {
				end = o.argsEnd
			}
			if end > o.argsStart {
				p.streamArgs(p.buf[o.argsStart:end])
			}
		}
		p.endCall()
		p.buf, p.st = p.buf[max(o.badAt, 0):], stText
		return
	}
	if o.bad {
		if top {
			p.sawText = true
			p.st = stText
			p.text(p.buf[:1]) // the "{" is content; scan on
			p.buf = p.buf[1:]
			return
		}
		if p.st == stTagObj {
			p.asText("<tool_call>")
			return
		}
		p.st = stText // a broken array element: the rest is content
		return
	}
	if o.nameDone && !p.open {
		p.startCall(o.name)
	}
	if p.open && o.argsStart >= 0 {
		end := len(p.buf)
		if o.argsEnd >= 0 {
			end = o.argsEnd
		}
		if o.end < 0 || p.argsRaw {
			p.streamArgs(p.buf[o.argsStart:end])
		}
	}
	if o.end >= 0 {
		if !p.open {
			// A complete object without a name: not a call.
			if top {
				p.sawText = true
				p.st = stText
				p.text(p.buf[:1])
				p.buf = p.buf[1:]
				return
			}
			p.buf, p.st = p.buf[o.end:], then
			return
		}
		raw := ""
		if o.argsStart >= 0 {
			raw = p.buf[o.argsStart:o.argsEnd]
		}
		p.finishArgs(raw, o.argsStart >= 0)
		p.buf, p.st = p.buf[o.end:], then
		return
	}
	if final {
		if p.open {
			p.endCall()
			p.buf, p.st = "", stText
			return
		}
		if top || p.st == stTagObj {
			marker := ""
			if p.st == stTagObj {
				marker = "<tool_call>"
			}
			p.text(marker + p.buf)
			p.buf, p.st = "", stText
			return
		}
		p.buf, p.st = "", stText
	}
}

func (p *Parser) stepMistralName(final bool) {
	// A name is looked for within maxName bytes: [ARGS] must begin by
	// then, whether it came in the same piece or later (so a stream and
	// the whole text agree).
	args := strings.Index(p.buf, "[ARGS]")
	if args < 0 || args > maxName {
		if args > maxName || len(p.buf) >= maxName+len("[ARGS]") || final {
			p.asText("[TOOL_CALLS]")
		}
		return
	}
	name := p.buf[:args]
	if i := strings.Index(name, "[CALL_ID]"); i >= 0 {
		name = name[:i]
	}
	name = strings.TrimSpace(name)
	if name == "" {
		p.asText("[TOOL_CALLS]")
		return
	}
	p.startCall(name)
	p.buf, p.st = p.buf[args+len("[ARGS]"):], stRawArgs
}

func (p *Parser) stepRawArgs(final bool) {
	t := trimSpace(p.buf)
	if t == "" {
		if final {
			p.finishArgs("", false)
			p.buf, p.st = "", stText
		}
		return
	}
	p.buf = t
	end, done, ok := skipValue(t, 0)
	if !ok {
		// Arguments as far as they were well formed; the rest is content.
		p.streamArgs(t[:end])
		p.endCall()
		p.buf, p.st = t[end:], stText
		return
	}
	if !done {
		p.streamArgs(t)
		if final {
			p.endCall()
			p.buf, p.st = "", stText
		}
		return
	}
	p.finishArgs(t[:end], true)
	p.buf, p.st = t[end:], stText
}

// object is what scanObject found of a call object.
type object struct {
	name               string
	nameDone           bool
	argsStart, argsEnd int // argsEnd -1 while incomplete; argsStart -1 if not seen
	end                int // after the closing brace; -1 while incomplete
	bad                bool
	badAt              int // where it went wrong
	wrapper            int // Generic: just past `{"tool_calls": [`; -1 if not that
}

// scanObject reads a call object {"name": ..., "arguments"|"parameters":
// ...} from s[0] == '{' as far as s goes. strict (an answer that may be
// plain JSON) wants "name" first, after at most a "type".
func scanObject(s string, strict bool) object {
	o := object{argsStart: -1, argsEnd: -1, end: -1, wrapper: -1}
	fail := func(at int) object {
		o.bad, o.badAt = true, at
		return o
	}
	i := 1
	for first := true; ; first = false {
		i = skipWS(s, i)
		if i >= len(s) {
			return o
		}
		if s[i] == '}' && first {
			return fail(i)
		}
		if s[i] != '"' {
			return fail(i)
		}
		kend, kdone, ok := skipString(s, i)
		if !ok {
			return fail(kend)
		}
		if !kdone {
			return o
		}
		var key string
		if json.Unmarshal([]byte(s[i:kend]), &key) != nil {
			return fail(i)
		}
		i = skipWS(s, kend)
		if i >= len(s) {
			return o
		}
		if s[i] != ':' {
			return fail(i)
		}
		i = skipWS(s, i+1)
		if i >= len(s) {
			if (key == "arguments" || key == "parameters") && o.argsStart < 0 {
				o.argsStart = i
			}
			return o
		}
		switch {
		case key == "name" && !o.nameDone:
			if s[i] != '"' {
				return fail(i)
			}
			end, done, ok := skipString(s, i)
			if !ok {
				return fail(end)
			}
			if !done {
				return o
			}
			if json.Unmarshal([]byte(s[i:end]), &o.name) != nil || o.name == "" {
				return fail(i)
			}
			o.nameDone = true
			i = end
		case (key == "arguments" || key == "parameters") && o.argsStart < 0:
			o.argsStart = i
			end, done, ok := skipValue(s, i)
			if !ok {
				return fail(end)
			}
			if !done {
				return o
			}
			o.argsEnd = end
			i = end
		case strict && first && key == "tool_calls":
			if s[i] != '[' {
				return fail(i)
			}
			o.wrapper = i + 1
			return o
		case strict && !o.nameDone && key != "type":
			return fail(i)
		default:
			end, done, ok := skipValue(s, i)
			if !ok {
				return fail(end)
			}
			if !done {
				return o
			}
			i = end
		}
		i = skipWS(s, i)
		if i >= len(s) {
			return o
		}
		switch s[i] {
		case ',':
			i++
		case '}':
			o.end = i + 1
			return o
		default:
			return fail(i)
		}
	}
}

func skipWS(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// skipString reads the JSON string at s[i] == '"': its end, whether it is
// complete, and whether it is well formed so far.
func skipString(s string, i int) (end int, done, ok bool) {
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '\\':
			j++
		case c == '"':
			return j + 1, true, true
		case c < 0x20:
			return j, false, false
		}
	}
	return len(s), false, true
}

// maxDepth bounds the nesting skipValue follows.
const maxDepth = 512

// skipValue reads the JSON value at s[i]: its end, whether it is complete
// and whether it is well formed as far as it goes (brackets matched,
// strings closed; numbers and literals by their characters). When it is
// not, end is where it went wrong.
func skipValue(s string, i int) (end int, done, ok bool) {
	if i >= len(s) {
		return i, false, true
	}
	switch c := s[i]; {
	case c == '"':
		return skipString(s, i)
	case c == '{' || c == '[':
		var stack []byte
		for j := i; j < len(s); j++ {
			switch c := s[j]; c {
			case '"':
				end, done, ok := skipString(s, j)
				if !ok {
					return end, false, false
				}
				if !done {
					return len(s), false, true
				}
				j = end - 1
			case '{', '[':
				if len(stack) == maxDepth {
					return j, false, false
				}
				stack = append(stack, c)
			case '}', ']':
				want := byte('{')
				if c == ']' {
					want = '['
				}
				if len(stack) == 0 || stack[len(stack)-1] != want {
					return j, false, false
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return j + 1, true, true
				}
			}
		}
		return len(s), false, true
	case c == '-' || c >= '0' && c <= '9' || c == 't' || c == 'f' || c == 'n':
		j := i
		for j < len(s) && strings.IndexByte("+-.0123456789eEtruefalsn", s[j]) >= 0 {
			j++
		}
		if j == len(s) {
			return j, false, true // the number or literal may go on
		}
		return j, true, true
	}
	return i, false, false
}

// stepXML reads a call in Qwen3-Coder's XML form, from buf at
// "<function=": the name, then each <parameter=k>value</parameter>, up to
// </function>. The call is named as soon as its name is read; its
// arguments, a JSON object built from the parameters, go at its end.
func (p *Parser) stepXML(final bool) {
	s := p.buf
	end := strings.IndexByte(s, '>')
	if end < 0 || end > maxName {
		// Not within maxName bytes, however the text came in pieces.
		if end > maxName || len(s) > maxName || final {
			p.asText("<tool_call>")
		}
		return
	}
	name := strings.TrimSpace(s[len("<function="):end])
	if !p.open {
		if name == "" || strings.ContainsAny(name, "<\n") {
			p.asText("<tool_call>")
			return
		}
		p.startCall(name)
	}
	var args strings.Builder
	args.WriteByte('{')
	n := 0
	i := end + 1
	done := func(at int, then state) {
		args.WriteByte('}')
		p.finishArgs(args.String(), true)
		p.buf, p.st = s[at:], then
	}
	for {
		i = skipWS(s, i)
		rest := s[i:]
		switch {
		case strings.HasPrefix(rest, "</function>"):
			done(i+len("</function>"), stClose)
			return
		case strings.HasPrefix(rest, "<parameter="):
			kend := strings.IndexByte(rest, '>')
			vend := strings.Index(rest, "</parameter>")
			if kend < 0 || vend < 0 || vend < kend {
				if final {
					done(len(s), stText)
				}
				return
			}
			key := strings.TrimSpace(rest[len("<parameter="):kend])
			value := strings.TrimPrefix(rest[kend+1:vend], "\n")
			value = strings.TrimSuffix(value, "\n")
			if n > 0 {
				args.WriteByte(',')
			}
			n++
			args.Write(quoteJSON(key))
			args.WriteByte(':')
			args.WriteString(p.xmlValue(key, value))
			i += vend + len("</parameter>")
		case !final && (strings.HasPrefix("</function>", rest) || strings.HasPrefix("<parameter=", rest)):
			return // more to come
		default:
			// Not the XML form going on: the call ends here.
			done(i, stText)
			return
		}
	}
}

// xmlValue is a parameter's text as a JSON value: a string where the
// tool's schema says so (or the text is not JSON), else the JSON it spells
// (Python's True, False and None, as the template's `| string` writes
// them, included).
func (p *Parser) xmlValue(key, value string) string {
	typ := ""
	if p.ParamType != nil {
		typ = p.ParamType(p.name, key)
	}
	t := strings.TrimSpace(value)
	if typ != "string" {
		switch t {
		case "True":
			return "true"
		case "False":
			return "false"
		case "None":
			return "null"
		}
		if t != "" && t[0] != '"' && json.Valid([]byte(t)) {
			return t
		}
	}
	return string(quoteJSON(value))
}

func quoteJSON(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// stepGemma reads a Gemma 4 call after <|tool_call>: call:NAME{…} up to
// <tool_call|> (or the stream's end, where a forced call's grammar stops
// before that control token). The arguments come whole, as JSON, once the
// call is complete; text that is not a call stays content.
func (p *Parser) stepGemma(final bool) {
	const head = "call:"
	t := p.buf
	if len(t) < len(head) && strings.HasPrefix(head, t) && !final {
		return // the call's head on its way
	}
	if !strings.HasPrefix(t, head) {
		p.asText(gemmaOpen)
		return
	}
	body, rest := t, ""
	if end := strings.Index(t, gemmaClose); end >= 0 {
		body, rest = t[:end], t[end+len(gemmaClose):]
	} else if !final {
		if brace := strings.IndexByte(t, '{'); brace < 0 && len(t) > len(head)+maxName {
			p.asText(gemmaOpen) // no arguments within a name's length
		}
		return
	}
	name, args, ok := gemmaCall(body[len(head):])
	if !ok {
		p.asText(gemmaOpen)
		return
	}
	p.startCall(name)
	p.args(args)
	p.open, p.afterCall = false, true
	p.buf, p.st = rest, stText
}

// gemmaCall reads NAME{…} and returns the name and the arguments as
// JSON; false where s is not that, whole.
func gemmaCall(s string) (name, args string, ok bool) {
	brace := strings.IndexByte(s, '{')
	if brace <= 0 || brace > maxName {
		return "", "", false
	}
	name = s[:brace]
	if strings.ContainsAny(name, " \t\r\n<>{}:,\"") {
		return "", "", false
	}
	var b strings.Builder
	end, ok := gemmaValue(&b, s, brace, 0)
	if !ok || skipWS(s, end) != len(s) {
		return "", "", false
	}
	return name, b.String(), true
}

// maxGemmaDepth bounds how deeply a call's arguments nest.
const maxGemmaDepth = 64

// gemmaValue writes as JSON the Gemma-notation value at s[i] and returns
// where it ends: a string between <|"|> markers (its text as it is), an
// object of bare or <|"|>-quoted keys, an array, or a JSON number, true,
// false or null.
func gemmaValue(b *strings.Builder, s string, i, depth int) (int, bool) {
	if depth > maxGemmaDepth {
		return 0, false
	}
	i = skipWS(s, i)
	switch {
	case strings.HasPrefix(s[i:], gemmaQuote):
		text, end, ok := gemmaString(s, i)
		if ok {
			b.Write(quoteJSON(text))
		}
		return end, ok
	case i < len(s) && (s[i] == '{' || s[i] == '['):
		obj := s[i] == '{'
		closer := byte(']')
		if obj {
			closer = '}'
		}
		b.WriteByte(s[i])
		i = skipWS(s, i+1)
		if i < len(s) && s[i] == closer {
			b.WriteByte(closer)
			return i + 1, true
		}
		for n := 0; ; n++ {
			if n > 0 {
				b.WriteByte(',')
			}
			if obj {
				key, end, ok := gemmaKey(s, i)
				if !ok {
					return 0, false
				}
				b.Write(quoteJSON(key))
				b.WriteByte(':')
				i = end
			}
			var ok bool
			if i, ok = gemmaValue(b, s, i, depth+1); !ok {
				return 0, false
			}
			i = skipWS(s, i)
			switch {
			case i < len(s) && s[i] == ',':
				i = skipWS(s, i+1)
			case i < len(s) && s[i] == closer:
				b.WriteByte(closer)
				return i + 1, true
			default:
				return 0, false
			}
		}
	}
	// A scalar: up to the next delimiter, and JSON's own spelling.
	end := i
	for end < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[end])) {
		end++
	}
	tok := s[i:end]
	var v any
	if tok == "" || json.Unmarshal([]byte(tok), &v) != nil {
		return 0, false
	}
	switch v.(type) {
	case float64, bool, nil:
		b.WriteString(tok)
		return end, true
	}
	return 0, false
}

// gemmaKey reads an object key at s[i] and the colon after it: bare text
// up to the colon, or a <|"|>-quoted one; it returns the key and where
// its value begins.
func gemmaKey(s string, i int) (key string, next int, ok bool) {
	if strings.HasPrefix(s[i:], gemmaQuote) {
		if key, i, ok = gemmaString(s, i); !ok {
			return "", 0, false
		}
	} else {
		end := i
		for end < len(s) && s[end] != ':' && s[end] != '}' && s[end] != ',' {
			end++
		}
		key, i = strings.TrimSpace(s[i:end]), end
		if key == "" {
			return "", 0, false
		}
	}
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return "", 0, false
	}
	return key, i + 1, true
}

// gemmaString reads the <|"|>-quoted string at s[i]: its text, as it is,
// and where it ends.
func gemmaString(s string, i int) (text string, end int, ok bool) {
	start := i + len(gemmaQuote)
	n := strings.Index(s[start:], gemmaQuote)
	if n < 0 {
		return "", 0, false
	}
	return s[start : start+n], start + n + len(gemmaQuote), true
}
