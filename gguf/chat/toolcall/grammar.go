package toolcall

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meshnode/meshnode/gguf/grammar"
)

// Tool is what a grammar needs of a tool: its name and the JSON Schema of
// its parameters (nil: any JSON object).
type Tool struct {
	Name       string
	Parameters []byte
}

// SchemaError is a tool whose parameters' schema the grammar compiler
// refuses; Err is the compiler's (a *grammar.UnsupportedError for a
// keyword it cannot enforce).
type SchemaError struct {
	Index int // in the tools given
	Err   error
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("toolcall: tool %d's parameters: %v", e.Index, e.Err)
}

func (e *SchemaError) Unwrap() error { return e.Err }

// Grammar is the grammar of a reply that calls tools in format f, for
// tool_choice "required" or a named function: the reply is nothing but
// the call (of the tool named only, when only is not "", else of any of
// tools), or several calls where parallel allows and the format has a
// way to write them; each call's arguments match its tool's schema. The
// calls are written as the model's template renders them. A harmony
// model (gpt-oss) may first reason in an analysis message, as it would
// unforced; its call is one message to functions.NAME, one a turn.
//
// A control token cannot be forced (the token mask only allows tokens
// that spell text), so where the format opens its calls with one
// (Mistral's [TOOL_CALLS], Granite's <|tool_call|>) the grammar starts
// after it, and prefix is the text to feed the parser before the output.
func Grammar(f Format, tools []Tool, only string, parallel bool) (g *grammar.Grammar, prefix string, err error) {
	b := grammar.NewBuilder()
	call, err := defineCalls(b, f, tools, only, false)
	if err != nil {
		return nil, "", err
	}
	// Llama 3.x's templates take one call per turn, and a harmony turn
	// ends with its call (<|call|>).
	// Gemma 4's calls are separated by control tokens (<tool_call|>
	// <|tool_call>), which cannot be forced: one call.
	many := parallel && only == "" && f != Llama3 && f != Harmony && f != Gemma4
	list := func(sep string) grammar.Expr {
		if !many {
			return call
		}
		return grammar.Seq(call, grammar.Star(grammar.Seq(grammar.Lit(sep), call)))
	}
	var root grammar.Expr
	switch f {
	case Hermes:
		root = list("\n")
	case Llama3:
		root = call
	case Harmony:
		root = grammar.Seq(grammar.Opt(harmonyAnalysis()), call)
	case Mistral:
		root, prefix = grammar.Seq(grammar.Lit("["), list(", "), grammar.Lit("]")), "[TOOL_CALLS]"
	case Granite:
		root, prefix = grammar.Seq(grammar.Lit("["), list(", "), grammar.Lit("]")), "<|tool_call|>"
	case Gemma4:
		root, prefix = call, gemmaOpen
	case LFM2:
		root, prefix = grammar.Seq(grammar.Lit("["), list(", "), grammar.Lit("]")), pyOpen
	default:
		root = grammar.Seq(grammar.Lit(`{"tool_calls": [`), list(", "), grammar.Lit("]}"))
	}
	b.Define("root", root)
	g, err = b.Build("root")
	if err != nil {
		return nil, "", fmt.Errorf("toolcall: building the grammar: %w", err)
	}
	return g, prefix, nil
}

// LazyGrammar is the grammar of a reply under tool_choice "auto" whose
// calls must meet their tools' schemas (OpenAI's strict tools): a lazy
// grammar (grammar.Grammar.Lazy) that leaves the reply free until the
// model opens a call as format f opens one (its marker, or, for the
// formats whose call is a bare JSON answer, a "{" that begins the
// reply), and holds what follows to calls of tools, each one's
// arguments to its Parameters (nil: any JSON object). White space
// inside a call's JSON is the model's to choose, as it was when it
// chose to call. A harmony call is a message to functions.NAME on the
// commentary channel, as Grammar's.
func LazyGrammar(f Format, tools []Tool, parallel bool) (*grammar.Grammar, error) {
	b := grammar.NewBuilder()
	call, err := defineCalls(b, f, tools, "", true)
	if err != nil {
		return nil, err
	}
	ws := b.WS()
	many := parallel && f != Llama3 && f != Harmony && f != Gemma4
	list := func(sep ...grammar.Expr) grammar.Expr {
		if !many {
			return call
		}
		return grammar.Seq(call, grammar.Star(grammar.Seq(append(sep, call)...)))
	}
	array := grammar.Seq(grammar.Lit("["), ws, list(ws, grammar.Lit(","), ws), ws, grammar.Lit("]"))
	var root grammar.Expr
	var triggers []grammar.Trigger
	switch f {
	case Hermes:
		root = list(ws)
		triggers = []grammar.Trigger{{Text: "<tool_call>", Included: true}}
	case Llama3:
		root = call
		triggers = []grammar.Trigger{{Text: "{", AtStart: true, Included: true}, {Text: "<|python_tag|>"}}
	case Harmony:
		root = call
		triggers = []grammar.Trigger{{Text: harmonyCall, Included: true}}
	case Mistral:
		root = array
		triggers = []grammar.Trigger{{Text: "[TOOL_CALLS]"}}
	case Granite:
		root = array
		triggers = []grammar.Trigger{{Text: "<|tool_call|>"}}
	case Gemma4:
		root = call
		triggers = []grammar.Trigger{{Text: gemmaOpen}}
	case LFM2:
		root = array
		triggers = []grammar.Trigger{{Text: pyOpen}}
	default:
		// The polyfill's answer: {"tool_calls": [...]} or one call.
		wrapper := grammar.Seq(grammar.Lit("{"), ws, grammar.Lit(`"tool_calls"`), ws, grammar.Lit(":"), ws, array, ws, grammar.Lit("}"))
		root = grammar.Alt(wrapper, call)
		triggers = []grammar.Trigger{{Text: "{", AtStart: true, Included: true}}
	}
	b.Define("root", root)
	g, err := b.Build("root")
	if err == nil {
		g, err = g.Lazy(triggers...)
	}
	if err != nil {
		return nil, fmt.Errorf("toolcall: building the grammar: %w", err)
	}
	return g, nil
}

// ErrControlMarker is the error of ContentOrCalls for a format whose
// calls open with a control token (Mistral's [TOOL_CALLS], Granite's
// <|tool_call|>, Gemma 4's <|tool_call>, LFM2's <|tool_call_start|>): a
// grammar cannot make the model write one, so it cannot offer the calls
// beside the content.
var ErrControlMarker = errors.New("toolcall: the format's calls open with a control token, which a grammar cannot write")

// ContentOrCalls is the grammar of a reply under tool_choice "auto" that
// also has a response format: either content, as content defines it in
// b (a JSON value of the format's schema), or calls of tools in format
// f, written as the template renders them, each tool's arguments held to
// its Parameters (nil: any JSON object). A harmony model may reason
// first before a call, as under Grammar. Formats whose calls open with a
// control token are refused (ErrControlMarker).
func ContentOrCalls(f Format, tools []Tool, parallel bool, content func(b *grammar.Builder) (grammar.Expr, error)) (*grammar.Grammar, error) {
	switch f {
	case Mistral, Granite, Gemma4, LFM2:
		return nil, fmt.Errorf("%w (%v)", ErrControlMarker, f)
	}
	b := grammar.NewBuilder()
	call, err := defineCalls(b, f, tools, "", false)
	if err != nil {
		return nil, err
	}
	body, err := content(b)
	if err != nil {
		return nil, err
	}
	var calls grammar.Expr
	switch f {
	case Hermes:
		calls = call
		if parallel {
			calls = grammar.Seq(call, grammar.Star(grammar.Seq(grammar.Lit("\n"), call)))
		}
	case Llama3:
		calls = call
	case Harmony:
		calls = grammar.Seq(grammar.Opt(harmonyAnalysis()), call)
	default:
		list := call
		if parallel {
			list = grammar.Seq(call, grammar.Star(grammar.Seq(grammar.Lit(", "), call)))
		}
		calls = grammar.Seq(grammar.Lit(`{"tool_calls": [`), list, grammar.Lit("]}"))
	}
	b.Define("root", grammar.Alt(body, calls))
	g, err := b.Build("root")
	if err != nil {
		return nil, fmt.Errorf("toolcall: building the grammar: %w", err)
	}
	return g, nil
}

// harmonyCall is how a harmony call's header begins: the commentary
// channel, addressed to a function.
const harmonyCall = "<|channel|>commentary to=functions."

// defineCalls defines the rule "call": one call of tools (of the one
// named only, when it is not ""), in format f, its arguments held to
// the tool's schema, and returns a reference to it. loose lets white
// space vary inside a JSON call, as JSON does; otherwise the call is
// spelled as the model's template renders it.
func defineCalls(b *grammar.Builder, f Format, tools []Tool, only string, loose bool) (grammar.Expr, error) {
	var calls []grammar.Expr
	for i, t := range tools {
		if only != "" && t.Name != only {
			continue
		}
		args := b.JSONObject()
		if len(t.Parameters) > 0 {
			var err error
			if args, err = b.Schema(t.Parameters); err != nil {
				return grammar.Expr{}, &SchemaError{Index: i, Err: err}
			}
		}
		// object is a JSON call {"name": NAME, "<key>": args}.
		object := func(key string) grammar.Expr {
			if !loose {
				return grammar.Seq(grammar.Lit(`{"name": "`+t.Name+`", "`+key+`": `), args, grammar.Lit("}"))
			}
			ws := b.WS()
			return grammar.Seq(grammar.Lit("{"), ws, grammar.Lit(`"name"`), ws, grammar.Lit(":"), ws, grammar.Lit(`"`+t.Name+`"`),
				ws, grammar.Lit(","), ws, grammar.Lit(`"`+key+`"`), ws, grammar.Lit(":"), ws, args, ws, grammar.Lit("}"))
		}
		var call grammar.Expr
		switch f {
		case Harmony:
			// The header as gpt-oss writes it (OpenAI's harmony guide):
			// the recipient on the commentary channel, the arguments'
			// content type optional.
			call = grammar.Seq(grammar.Lit(harmonyCall+t.Name),
				grammar.Alt(grammar.Lit(" <|constrain|>json"), grammar.Lit(" json"), grammar.Seq()),
				grammar.Lit("<|message|>"), args)
		case Hermes:
			if loose {
				call = grammar.Seq(grammar.Lit("<tool_call>"), b.WS(), object("arguments"), b.WS(), grammar.Lit("</tool_call>"))
			} else {
				call = grammar.Seq(grammar.Lit("<tool_call>\n"), object("arguments"), grammar.Lit("\n</tool_call>"))
			}
		case Llama3:
			call = object("parameters")
		case Gemma4:
			// Gemma's notation, not JSON, so the arguments follow its
			// grammar but not the tool's schema (as llama.cpp's).
			call = grammar.Seq(grammar.Lit("call:"+t.Name), gemmaObject(b))
		case LFM2:
			// A Python call: its keyword arguments named by the
			// schema, their values Python literals; loose, white space
			// inside the parentheses.
			kw := pythonArgs(b, t.Parameters)
			if loose {
				kw = grammar.Seq(b.WS(), kw, b.WS())
			}
			call = grammar.Seq(grammar.Lit(t.Name+"("), kw, grammar.Lit(")"))
		default: // Mistral, Generic: an element of a JSON array
			call = object("arguments")
		}
		calls = append(calls, call)
	}
	if len(calls) == 0 {
		return grammar.Expr{}, fmt.Errorf("toolcall: no tool named %q", only)
	}
	b.Define("call", grammar.Alt(calls...))
	return grammar.Ref("call"), nil
}

// harmonyAnalysis is a gpt-oss analysis message before its call: the
// model reasons as it would unforced, then opens the assistant's next
// message, its text holding no marker (markerFree).
func harmonyAnalysis() grammar.Expr {
	return grammar.Seq(grammar.Lit("<|channel|>analysis<|message|>"), markerFree(), grammar.Lit("<|end|><|start|>assistant"))
}

// markerFree is any bytes but a marker's "<|": a "<" is allowed when no
// "|" follows, so a run of them cannot end the text.
func markerFree() grammar.Expr {
	var notLT, notLTPipe grammar.Class
	notLT.Add(0, '<'-1)
	notLT.Add('<'+1, 0xff)
	notLTPipe.Add(0, '<'-1)
	notLTPipe.Add('<'+1, '|'-1)
	notLTPipe.Add('|'+1, 0xff)
	return grammar.Star(grammar.Alt(grammar.ClassOf(notLT),
		grammar.Seq(grammar.Repeat(grammar.Lit("<"), 1, -1), grammar.ClassOf(notLTPipe))))
}

// gemmaObject is an object in Gemma 4's notation (the parser's
// gemmaValue): {key:value,…} with bare keys, strings between <|"|>
// markers (holding no "<|"), JSON numbers, true, false, null, arrays and
// objects.
func gemmaObject(b *grammar.Builder) grammar.Expr {
	if !b.Defined("gemma-value") {
		var key grammar.Class
		for c := 0; c < 256; c++ {
			if !strings.ContainsRune(":{}[],<\" \t\r\n", rune(c)) {
				key.Add(byte(c), byte(c))
			}
		}
		scalar := func(schema string) grammar.Expr {
			e, err := b.Schema([]byte(schema))
			if err != nil {
				panic("toolcall: " + err.Error()) // constant schemas
			}
			return e
		}
		ws := b.WS()
		list := func(open, item, close string) grammar.Expr {
			it := grammar.Ref(item)
			return grammar.Seq(grammar.Lit(open), ws, grammar.Alt(grammar.Lit(close),
				grammar.Seq(it, grammar.Star(grammar.Seq(grammar.Lit(","), ws, it)), ws, grammar.Lit(close))))
		}
		b.Define("gemma-string", grammar.Seq(grammar.Lit(gemmaQuote), markerFree(), grammar.Lit(gemmaQuote)))
		b.Define("gemma-member", grammar.Seq(grammar.Repeat(grammar.ClassOf(key), 1, -1), grammar.Lit(":"), ws, grammar.Ref("gemma-value")))
		b.Define("gemma-object", list("{", "gemma-member", "}"))
		b.Define("gemma-array", list("[", "gemma-value", "]"))
		b.Define("gemma-value", grammar.Alt(grammar.Ref("gemma-string"), grammar.Ref("gemma-object"), grammar.Ref("gemma-array"),
			scalar(`{"type": "number"}`), scalar(`{"type": "boolean"}`), scalar(`{"type": "null"}`)))
	}
	return grammar.Ref("gemma-object")
}
