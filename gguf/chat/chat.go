// Package chat turns an OpenAI-style conversation into the prompt text a
// model was trained on, by rendering the Jinja chat template its GGUF file
// carries (tokenizer.chat_template) the way Hugging Face transformers does:
// trim_blocks and lstrip_blocks, loop controls, namespace(),
// raise_exception, strftime_now, bos_token and eos_token.
//
// A file without a template gets a plain transcript (see Transcript); a
// template the Jinja engine cannot compile falls back to one of llama.cpp's
// built-in formats when it is recognisably one of them, and otherwise is an
// error that says so.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/meshnode/meshnode/gguf/chat/jinja"
)

// Message is one turn of a conversation. Content is plain text: the API
// layer flattens OpenAI content-part arrays before it gets here (and a
// null content is ""). ToolCalls are an assistant's function calls; a
// "tool" message answers the call ToolCallID, and may carry the
// function's Name.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Reasoning is an assistant's reasoning, given back: it reaches the
	// template as reasoning_content (Qwen3's, DeepSeek's, GLM's…) and as
	// thinking (gpt-oss's), only when set.
	Reasoning  string     `json:"reasoning_content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// Options carry what a template may refer to besides the messages.
type Options struct {
	BOS, EOS string // bos_token and eos_token, as the tokenizer renders them
	// StripBOS and StripEOS remove a bos_token the template put at the very
	// start (and an eos_token at the very end), because the tokenizer adds
	// them itself (tokenizer.ggml.add_bos_token), as llama.cpp does.
	StripBOS, StripEOS bool
	// Now is the clock behind strftime_now (time.Now when nil).
	Now func() time.Time
}

// Errors: a template the engine cannot compile or render is ErrTemplate; a
// conversation the template itself rejects (raise_exception) is a
// *RejectedError, which the API answers as a bad request.
var ErrTemplate = errors.New("chat: template")

// RejectedError is the message of a template's raise_exception, such as
// "Conversation roles must alternate user/assistant/user/assistant/...".
type RejectedError struct{ Reason string }

func (e *RejectedError) Error() string { return "chat: template rejects the conversation: " + e.Reason }

// Template renders conversations for one model. It is compiled once and is
// safe for concurrent use.
type Template struct {
	src     string
	opt     Options
	jinja   *jinja.Template
	builtin builtinFormat // when jinja is nil: a llama.cpp built-in format, or the transcript
	kind    string
}

// Compile prepares src, a Jinja chat template. An empty src selects the
// plain transcript; the names "chatml", "llama2", "llama3", "phi3" and
// "gemma" select llama.cpp's built-in formats.
func Compile(src string, opt Options) (*Template, error) {
	t := &Template{src: src, opt: opt}
	if strings.TrimSpace(src) == "" {
		t.builtin, t.kind = transcript, "transcript"
		return t, nil
	}
	if f, ok := builtinFormats[src]; ok {
		t.builtin, t.kind = f, "builtin:"+src
		return t, nil
	}
	err := checkBounds(src)
	var tpl *jinja.Template
	if err == nil {
		tpl, err = compileJinja(src)
	}
	if err != nil {
		if name, f, ok := detect(src); ok {
			t.builtin, t.kind = f, "builtin:"+name
			return t, nil
		}
		return nil, fmt.Errorf("%w: does not compile and is not a format llama.cpp recognises: %w", ErrTemplate, err)
	}
	t.jinja, t.kind = tpl, "jinja"
	return t, nil
}

// Kind says how the template renders: "jinja", "builtin:NAME" or
// "transcript".
func (t *Template) Kind() string { return t.kind }

// Source is the template text Compile was given.
func (t *Template) Source() string { return t.src }

// Apply renders messages. With addGenerationPrompt the text ends with the
// opening of an assistant turn, so the model's continuation is the reply.
// It is Render without tools.
func (t *Template) Apply(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.Render(Input{Messages: messages, AddGenerationPrompt: addGenerationPrompt})
}

// compileJinja compiles src, turning a panic in the engine (a template from
// a file is outside input) into an error.
func compileJinja(src string) (tpl *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jinja engine failure: %v", r)
		}
	}()
	return jinja.Compile(src)
}

func (t *Template) render(messages []Message, tools []json.RawMessage, addGenerationPrompt bool, vars map[string]jinja.Value) (out string, err error) {
	return t.renderWithin(messages, tools, addGenerationPrompt, vars, renderLimits(messages, tools))
}

// renderWithin renders within lim (a *jinja.LimitError past it); vars
// are further variables the template is given (reasoning_effort).
func (t *Template) renderWithin(messages []Message, tools []json.RawMessage, addGenerationPrompt bool, vars map[string]jinja.Value, lim jinja.Limits) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("%w: cannot render: jinja engine failure: %v", ErrTemplate, r)
		}
	}()
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		msgs[i] = messageValue(m)
	}
	// transformers passes tools=None when there are none.
	toolsValue := jinja.None()
	if len(tools) > 0 {
		list := make([]jinja.Value, len(tools))
		for i, raw := range tools {
			if list[i], err = JSONValue(raw); err != nil {
				return "", fmt.Errorf("%w: tools[%d]: %w", ErrTemplate, i, err)
			}
		}
		toolsValue = jinja.NewList(list)
	}
	now := t.opt.Now
	if now == nil {
		now = time.Now
	}
	ctx := map[string]jinja.Value{
		"messages":              jinja.NewList(msgs),
		"tools":                 toolsValue,
		"add_generation_prompt": jinja.NewBool(addGenerationPrompt),
		"bos_token":             jinja.NewString(t.opt.BOS),
		"eos_token":             jinja.NewString(t.opt.EOS),
		"raise_exception":       jinja.NewCallable("raise_exception", raiseException),
		"range":                 jinja.NewMeteredCallable("range", rangeBudget(maxRange)),
		"strftime_now": jinja.NewMeteredCallable("strftime_now", func(m jinja.Meter, args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			format := "%Y-%m-%d"
			if len(args) > 0 && args[0].IsString() {
				format = args[0].AsString()
			}
			m.Alloc(5 * int64(len(format))) // "%B" is "September"
			return jinja.NewString(strftime(now(), format)), nil
		}),
	}
	for k, v := range vars {
		ctx[k] = v
	}
	out, err = t.jinja.RenderLimited(ctx, lim)
	if err != nil {
		if rej, ok := errors.AsType[*RejectedError](err); ok {
			return "", rej
		}
		return "", fmt.Errorf("%w: cannot render: %w", ErrTemplate, err)
	}
	return out, nil
}

func raiseException(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	reason := "raise_exception called"
	if len(args) > 0 {
		if args[0].IsString() {
			reason = args[0].AsString()
		} else {
			reason = args[0].String()
		}
	}
	return jinja.Undefined(), &RejectedError{Reason: reason}
}

// maxMacroDepth bounds how deeply macro calls nest. Real templates recurse
// only as deeply as the tools' JSON nests (gpt-oss's
// render_typescript_type, hermes's json_to_python_type: at most
// maxJSONDepth); the engine counts each call, by whatever name.
const maxMacroDepth = 4 * maxJSONDepth

// renderLimits is what one render of this conversation may spend: the
// engine's defaults, with room for the bytes to grow with the input, which
// a template copies some times over (a long conversation is sliced,
// stripped and concatenated turn by turn).
func renderLimits(messages []Message, tools []json.RawMessage) jinja.Limits {
	in := 0
	for _, m := range messages {
		in += len(m.Content) + len(m.Reasoning) + len(m.Role) + len(m.Name) + len(m.ToolCallID)
		for _, c := range m.ToolCalls {
			in += len(c.Name) + len(c.Arguments) + len(c.ID)
		}
	}
	for _, raw := range tools {
		in += len(raw)
	}
	lim := jinja.DefaultLimits()
	lim.Bytes += 32 * int64(in)
	lim.Work += 4 * int64(in)
	lim.Depth = maxMacroDepth
	return lim
}

// maxRange bounds the elements range() makes in one render: the engine
// builds each whole list, so a template from a hostile file could ask for
// billions of elements, or loop over a million a million times (nested
// loops over range, which held a core for as long as they ran). Real
// templates count messages or tools with it.
const maxRange = 1 << 20

// rangeBudget is one render's range(): Python's range over integers,
// refusing more than budget elements over all its calls.
func rangeBudget(budget uint64) func(jinja.Meter, []jinja.Value, map[string]jinja.Value) (jinja.Value, error) {
	return func(m jinja.Meter, args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		v, n, err := boundedRange(m, args, budget)
		if err != nil {
			return v, err
		}
		budget -= n
		return v, nil
	}
}

// boundedRange is Python's range over integers and its length, refusing
// more than limit elements.
func boundedRange(m jinja.Meter, args []jinja.Value, limit uint64) (jinja.Value, uint64, error) {
	var n [3]int64
	for i, a := range args {
		if i == 3 || !a.IsInt() {
			return jinja.Undefined(), 0, fmt.Errorf("range: want 1 to 3 integers, got %d arguments", len(args))
		}
		n[i] = a.AsInt()
	}
	start, stop, step := int64(0), n[0], int64(1)
	switch len(args) {
	case 0:
		return jinja.Undefined(), 0, fmt.Errorf("range: want 1 to 3 integers, got none")
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	}
	if step == 0 {
		return jinja.Undefined(), 0, fmt.Errorf("range: step must not be zero")
	}
	var count uint64
	switch {
	case step > 0 && stop > start:
		count = (uint64(stop-start) + uint64(step) - 1) / uint64(step)
	case step < 0 && stop < start:
		count = (uint64(start-stop) + uint64(-step) - 1) / uint64(-step)
	}
	if count > limit {
		return jinja.Undefined(), 0, fmt.Errorf("range: %d elements, more than the %d left of the %d a render may make", count, limit, maxRange)
	}
	m.Alloc(int64(count) * 32) // a Value and its box
	items := make([]jinja.Value, count)
	for i := range items {
		items[i] = jinja.NewInt(start + int64(i)*step)
	}
	return jinja.NewList(items), count, nil
}

// strftime formats t with the directives chat templates use (Python's
// strftime subset: %Y %y %m %d %-d %e %H %I %M %S %p %B %b %A %a %j %%).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case '-':
			if i+1 < len(format) && format[i+1] == 'd' {
				i++
				fmt.Fprintf(&b, "%d", t.Day())
			} else {
				b.WriteString("%-")
			}
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'B':
			b.WriteString(t.Month().String())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
