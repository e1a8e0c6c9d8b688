package grammar

// JSON's grammar, as rules a Builder defines once and every schema's
// rules refer to.
//
// Whitespace is bounded: between two tokens of the JSON text the grammar
// allows nothing, one space, or a newline and at most MaxIndent spaces
// or tabs, and none before or after the whole value. A model can then
// write JSON compact or pretty-printed, but cannot spend its tokens on a
// run of blanks (llama.cpp bounds it the same way). Numbers are bounded
// too: at most 16 digits before the point (no leading zeros), 16 after
// it, 3 in the exponent.

// MaxIndent is the most spaces or tabs after a newline between two JSON
// tokens.
const MaxIndent = 20

// The JSON helper rules' names.
const (
	ruleWS      = "json-ws"
	ruleValue   = "json-value"
	ruleObject  = "json-object"
	ruleArray   = "json-array"
	ruleString  = "json-string"
	ruleChar    = "json-char"
	ruleNumber  = "json-number"
	ruleInteger = "json-integer"
	ruleBool    = "json-boolean"
	ruleNull    = "json-null"
)

var (
	digit   = Bytes([2]byte{'0', '9'})
	hexDig  = Bytes([2]byte{'0', '9'}, [2]byte{'a', 'f'}, [2]byte{'A', 'F'})
	nonZero = Bytes([2]byte{'1', '9'})
)

// WS is the bounded whitespace the JSON rules allow between two tokens
// (nothing, a space, or a newline and at most MaxIndent blanks), for a
// grammar that wraps JSON values in its own text.
func (b *Builder) WS() Expr { return b.ws() }

// ws is the bounded whitespace between two JSON tokens.
func (b *Builder) ws() Expr {
	b.jsonRule(ruleWS, func() Expr {
		return Alt(Seq(), Lit(" "), Seq(Lit("\n"), Repeat(Bytes([2]byte{' ', ' '}, [2]byte{'\t', '\t'}), 0, MaxIndent)))
	})
	return Ref(ruleWS)
}

// jsonRule defines a helper rule once.
func (b *Builder) jsonRule(name string, def func() Expr) {
	if b.json[name] {
		return
	}
	b.json[name] = true
	b.Define(name, def())
}

// JSONValue is any JSON value.
func (b *Builder) JSONValue() Expr {
	if !b.json[ruleValue] {
		b.json[ruleValue] = true
		b.reserve(ruleValue)
		b.Define(ruleValue, Alt(b.JSONObject(), b.jsonArray(), b.JSONString(), b.jsonNumber(), b.jsonBool(), b.jsonNull()))
	}
	return Ref(ruleValue)
}

// JSONObject is any JSON object (response_format json_object).
func (b *Builder) JSONObject() Expr {
	if !b.json[ruleObject] {
		b.json[ruleObject] = true
		b.reserve(ruleObject)
		b.Define(ruleObject, b.mapOf(b.JSONValue()))
	}
	return Ref(ruleObject)
}

// mapOf is an object whose keys are any strings and whose values match v.
func (b *Builder) mapOf(v Expr) Expr {
	ws := b.ws()
	member := Seq(b.JSONString(), ws, Lit(":"), ws, v)
	return Seq(Lit("{"), ws, Opt(Seq(member, Star(Seq(ws, Lit(","), ws, member)), ws)), Lit("}"))
}

func (b *Builder) jsonArray() Expr {
	if !b.json[ruleArray] {
		b.json[ruleArray] = true
		b.reserve(ruleArray)
		b.Define(ruleArray, b.arrayOf(b.JSONValue(), 0, -1))
	}
	return Ref(ruleArray)
}

// arrayOf is an array of between lo and hi (hi < 0: any number) items
// matching item.
func (b *Builder) arrayOf(item Expr, lo, hi int) Expr {
	ws := b.ws()
	if hi == 0 {
		return Seq(Lit("["), ws, Lit("]"))
	}
	more := Seq(ws, Lit(","), ws, item)
	restHi := hi - 1
	if hi < 0 {
		restHi = -1
	}
	items := Seq(item, Repeat(more, max(lo-1, 0), restHi), ws)
	if lo == 0 {
		return Seq(Lit("["), ws, Opt(items), Lit("]"))
	}
	return Seq(Lit("["), ws, items, Lit("]"))
}

// tupleOf is an array of between lo and hi (hi < 0: any number) items
// whose first ones match items, one each, and the rest rest: written
// from the end, each item after the first lo optional, and after the
// tuple's items the rest repeated within what the bounds leave.
func (b *Builder) tupleOf(items []Expr, rest Expr, lo, hi int) Expr {
	ws := b.ws()
	sep := Seq(ws, Lit(","), ws)
	k := len(items)
	tail := Seq()
	if hi < 0 || hi > k {
		more := -1
		if hi >= 0 {
			more = hi - k
		}
		tail = Repeat(Seq(sep, rest), max(lo-k, 0), more)
	}
	// tail is what follows item i-1, from the last item back.
	for i := k - 1; i >= 1; i-- {
		if hi >= 0 && i >= hi {
			tail = Seq() // the bounds end the array before item i
			continue
		}
		next := Seq(sep, items[i], tail)
		if i >= lo {
			next = Opt(next)
		}
		tail = next
	}
	if hi == 0 {
		return Seq(Lit("["), ws, Lit("]"))
	}
	body := Seq(items[0], tail, ws)
	if lo == 0 {
		return Seq(Lit("["), ws, Opt(body), Lit("]"))
	}
	return Seq(Lit("["), ws, body, Lit("]"))
}

// JSONString is any JSON string: printable ASCII but the quote and
// backslash, valid UTF-8 beyond ASCII, and the escapes.
func (b *Builder) JSONString() Expr {
	b.jsonChar()
	b.jsonRule(ruleString, func() Expr { return Seq(Lit(`"`), Star(Ref(ruleChar)), Lit(`"`)) })
	return Ref(ruleString)
}

// stringOf is a JSON string of lo to hi characters (hi < 0: any).
func (b *Builder) stringOf(lo, hi int) Expr {
	b.jsonChar()
	return Seq(Lit(`"`), Repeat(Ref(ruleChar), lo, hi), Lit(`"`))
}

func (b *Builder) jsonChar() {
	b.jsonRule(ruleChar, func() Expr {
		return Alt(
			Bytes([2]byte{0x20, 0x21}, [2]byte{0x23, 0x5B}, [2]byte{0x5D, 0x7F}),
			UTF8(),
			Seq(Lit(`\`), Alt(Bytes([2]byte{'"', '"'}, [2]byte{'\\', '\\'}, [2]byte{'/', '/'}, [2]byte{'b', 'b'},
				[2]byte{'f', 'f'}, [2]byte{'n', 'n'}, [2]byte{'r', 'r'}, [2]byte{'t', 't'}),
				Seq(Lit("u"), hexDig, hexDig, hexDig, hexDig))),
		)
	})
}

func (b *Builder) jsonInteger() Expr {
	b.jsonRule(ruleInteger, func() Expr {
		return Seq(Opt(Lit("-")), Alt(Lit("0"), Seq(nonZero, Repeat(digit, 0, 15))))
	})
	return Ref(ruleInteger)
}

func (b *Builder) jsonNumber() Expr {
	b.jsonRule(ruleNumber, func() Expr {
		return Seq(b.jsonInteger(),
			Opt(Seq(Lit("."), Repeat(digit, 1, 16))),
			Opt(Seq(Bytes([2]byte{'e', 'e'}, [2]byte{'E', 'E'}), Opt(Bytes([2]byte{'-', '-'}, [2]byte{'+', '+'})), Repeat(digit, 1, 3))))
	})
	return Ref(ruleNumber)
}

func (b *Builder) jsonBool() Expr {
	b.jsonRule(ruleBool, func() Expr { return Alt(Lit("true"), Lit("false")) })
	return Ref(ruleBool)
}

func (b *Builder) jsonNull() Expr {
	b.jsonRule(ruleNull, func() Expr { return Lit("null") })
	return Ref(ruleNull)
}

// AnyJSONObject is the grammar of response_format json_object: one JSON
// object, nothing before or after it.
func AnyJSONObject() (*Grammar, error) {
	b := NewBuilder()
	b.Define("root", b.JSONObject())
	return b.Build("root")
}
