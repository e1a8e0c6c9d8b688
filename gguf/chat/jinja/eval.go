package jinja

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// =============================================================================
// Scope
// =============================================================================

type scope struct {
	vars   map[string]Value
	parent *scope
}

func newScope(parent *scope) *scope {
	return &scope{vars: make(map[string]Value, 4), parent: parent}
}

func (s *scope) get(name string) (Value, bool) {
	if v, ok := s.vars[name]; ok {
		return v, true
	}
	if s.parent != nil {
		return s.parent.get(name)
	}
	return Undefined(), false
}

func (s *scope) set(name string, val Value) {
	s.vars[name] = val
}

// =============================================================================
// Evaluator
// =============================================================================

type evaluator struct {
	scope    *scope
	builtins *scope
	output   builder
	b        *budget // the render's, shared by every evaluator it makes
}

// sub is an evaluator for a body rendered apart (a macro's, a block's)
// in s, on the same budget.
func (e *evaluator) sub(s *scope) *evaluator {
	return &evaluator{scope: s, builtins: e.builtins, output: builder{b: e.b}, b: e.b}
}

// invoke calls c, handing a builtin the render's budget and dict,
// namespace and macros the keyword arguments' order.
func (e *evaluator) invoke(c *Callable, args []Value, kwargs map[string]Value, order []string) (Value, error) {
	switch {
	case c.ordered != nil:
		return c.ordered(e.b, args, kwargs, order)
	case c.metered != nil:
		return c.metered(e.b, args, kwargs)
	}
	return c.Fn(args, kwargs)
}

// evalKwargs evaluates a call's keyword arguments and lists their names
// in the order written.
func (e *evaluator) evalKwargs(kws []kwarg) (map[string]Value, []string, error) {
	if len(kws) == 0 {
		return nil, nil, nil
	}
	kwargs, order := make(map[string]Value, len(kws)), make([]string, 0, len(kws))
	for _, kw := range kws {
		v, err := e.evalExpr(kw.value)
		if err != nil {
			return nil, nil, err
		}
		kwargs[kw.name] = v
		order = append(order, kw.name)
	}
	return kwargs, order, nil
}

// kwOrder is order where it names exactly kwargs' keys (a call from a
// template), else kwargs' keys sorted (a call from Go, whose map has no
// order).
func kwOrder(kwargs map[string]Value, order []string) []string {
	if len(order) == len(kwargs) && !slices.ContainsFunc(order, func(k string) bool { _, ok := kwargs[k]; return !ok }) {
		return order
	}
	return slices.Sorted(maps.Keys(kwargs))
}

func (e *evaluator) execNodes(nodes []node) error {
	for _, n := range nodes {
		if err := e.execNode(n); err != nil {
			return err
		}
	}
	return nil
}

func (e *evaluator) execNode(n node) error {
	e.b.step()
	switch nd := n.(type) {
	case *textNode:
		e.output.WriteString(nd.text)
		return nil

	case *outputNode:
		val, err := e.evalExpr(nd.expression)
		if err != nil {
			return err
		}
		e.output.WriteString(e.b.print(val))
		return nil

	case *ifNode:
		return e.execIf(nd)

	case *forNode:
		return e.execFor(nd)

	case *setNode:
		return e.execSet(nd)

	case *setBlockNode:
		return e.execSetBlock(nd)

	case *macroNode:
		return e.execMacro(nd)

	case *callNode:
		return e.execCall(nd)

	case *filterBlockNode:
		return e.execFilterBlock(nd)

	case *breakNode:
		return errBreak

	case *continueNode:
		return errContinue

	default:
		return fmt.Errorf("unknown node type %T", n)
	}
}

func (e *evaluator) execIf(n *ifNode) error {
	for _, branch := range n.branches {
		if branch.condition == nil {
			// else branch
			return e.execNodes(branch.body)
		}
		cond, err := e.evalExpr(branch.condition)
		if err != nil {
			return err
		}
		if cond.IsTruthy() {
			return e.execNodes(branch.body)
		}
	}
	return nil
}

func (e *evaluator) execFor(n *forNode) error {
	iterVal, err := e.evalExpr(n.iter)
	if err != nil {
		return err
	}
	return e.runFor(n, iterVal, 1)
}

// loopCall is the loop variable's entry that a recursive loop's
// loop(items) calls: loop is a dict of its attributes here.
const loopCall = "__call__"

// runFor runs loop n over iterVal at depth (1, deeper for a recursive
// loop's loop(items) calls).
func (e *evaluator) runFor(n *forNode, iterVal Value, depth int) error {
	var items []Value
	switch {
	case iterVal.IsList():
		items = iterVal.AsList().Items
	case iterVal.IsDict():
		d := iterVal.AsDict()
		e.b.allocValues(d.Len())
		for _, key := range d.Keys {
			items = append(items, NewString(key))
		}
	case iterVal.IsString():
		e.b.allocValues(utf8.RuneCountInString(iterVal.AsString()))
		for _, r := range iterVal.AsString() {
			items = append(items, NewString(string(r)))
		}
	default:
		// Empty iteration.
	}

	// Apply filter if present.
	if n.filterExpr != nil {
		e.b.allocValues(len(items))
		var filtered []Value
		for _, item := range items {
			e.b.steps(iterationSteps)
			child := newScope(e.scope)
			if err := e.assign(child, n.targets, n.unpack, item); err != nil {
				return fmt.Errorf("for: %w", err)
			}
			old := e.scope
			e.scope = child
			fv, err := e.evalExpr(n.filterExpr)
			e.scope = old
			if err != nil {
				return err
			}
			if fv.IsTruthy() {
				filtered = append(filtered, item)
			}
		}
		items = filtered
	}

	if len(items) == 0 {
		if n.elseBody != nil {
			return e.execNodes(n.elseBody)
		}
		return nil
	}

	total := int64(len(items))

	// Pre-allocate the loop dict and child scope once, then reuse them
	// across iterations to avoid per-iteration allocations.
	loop := NewDict()
	ld := loop.AsDict()
	ld.Set("length", NewInt(total))

	child := newScope(e.scope)
	child.set("loop", loop)
	ld.Set("depth", NewInt(int64(depth)))
	ld.Set("depth0", NewInt(int64(depth-1)))
	// loop.changed(*values): whether they differ from the last call's.
	var last []Value
	called := false
	ld.Set("changed", NewCallable("loop.changed", func(args []Value, kwargs map[string]Value) (Value, error) {
		changed := !called || len(args) != len(last)
		for i := 0; !changed && i < len(args); i++ {
			changed = !e.b.equal(args[i], last[i], 0)
		}
		called, last = true, slices.Clone(args)
		return NewBool(changed), nil
	}))
	if n.recursive {
		// loop(items) renders the loop's body over items, one deeper.
		ld.Set(loopCall, NewCallable("loop", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) != 1 {
				return Undefined(), fmt.Errorf("loop() takes the items to recurse into")
			}
			e.b.enter()
			defer e.b.leave()
			inner := e.sub(e.scope)
			if err := inner.runFor(n, args[0], depth+1); err != nil {
				return Undefined(), err
			}
			return NewString(inner.output.String()), nil
		}))
	}

	for i, item := range items {
		e.b.steps(iterationSteps)
		if err := e.assign(child, n.targets, n.unpack, item); err != nil {
			return fmt.Errorf("for: %w", err)
		}

		// Update loop object for this iteration.
		idx := int64(i)
		ld.Data["index"] = NewInt(idx + 1)
		ld.Data["index0"] = NewInt(idx)
		ld.Data["revindex"] = NewInt(total - idx)
		ld.Data["revindex0"] = NewInt(total - idx - 1)
		ld.Data["first"] = NewBool(i == 0)
		ld.Data["last"] = NewBool(i == len(items)-1)

		if i > 0 {
			ld.Data["previtem"] = items[i-1]
		} else {
			ld.Data["previtem"] = Undefined()
		}
		if i < len(items)-1 {
			ld.Data["nextitem"] = items[i+1]
		} else {
			ld.Data["nextitem"] = Undefined()
		}

		// cycle function — capture idx by value for closure correctness.
		cycleIdx := idx
		ld.Data["cycle"] = NewCallable("loop.cycle", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return Undefined(), nil
			}
			return args[int(cycleIdx)%len(args)], nil
		})

		old := e.scope
		e.scope = child

		err := e.execNodes(n.body)
		e.scope = old

		if err != nil {
			if errors.Is(err, errBreak) {
				break
			}
			if errors.Is(err, errContinue) {
				continue
			}
			return err
		}
	}

	return nil
}

func (e *evaluator) execSet(n *setNode) error {
	val, err := e.evalExpr(n.value)
	if err != nil {
		return err
	}

	if n.namespace != "" {
		nsVal, ok := e.scope.get(n.namespace)
		if !ok || !nsVal.IsDict() {
			return fmt.Errorf("set: namespace %q not found or not a dict", n.namespace)
		}
		e.b.allocValues(1)
		nsVal.AsDict().Set(n.targets[0], val)
		return nil
	}
	if err := e.assign(e.scope, n.targets, n.unpack, val); err != nil {
		return fmt.Errorf("set: %w", err)
	}
	return nil
}

// assign sets targets in sc to v, or, unpacking, to v's items in turn as
// Python unpacks: a list's or tuple's items, a string's characters, a
// dict's keys, exactly as many as there are targets.
func (e *evaluator) assign(sc *scope, targets []string, unpack bool, v Value) error {
	e.b.allocValues(len(targets))
	if !unpack {
		sc.set(targets[0], v)
		return nil
	}
	var items []Value
	switch {
	case v.IsList():
		items = v.AsList().Items
	case v.IsString():
		e.b.scan(int64(len(v.AsString())))
		for _, r := range v.AsString() {
			if len(items) > len(targets) {
				break
			}
			items = append(items, NewString(string(r)))
		}
	case v.IsDict():
		for _, k := range v.AsDict().Keys {
			if len(items) > len(targets) {
				break
			}
			items = append(items, NewString(k))
		}
	default:
		return fmt.Errorf("cannot unpack non-iterable %s into %d names", typeName(v), len(targets))
	}
	if len(items) > len(targets) {
		return fmt.Errorf("too many values to unpack (expected %d)", len(targets))
	}
	if len(items) < len(targets) {
		return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(targets), len(items))
	}
	for i, t := range targets {
		sc.set(t, items[i])
	}
	return nil
}

func (e *evaluator) execSetBlock(n *setBlockNode) error {
	bodyEval := e.sub(e.scope)
	if err := bodyEval.execNodes(n.body); err != nil {
		return err
	}
	e.scope.set(n.target, NewString(bodyEval.output.String()))
	return nil
}

func (e *evaluator) execMacro(n *macroNode) error {
	// Capture the macro body and params.
	params := n.params
	body := n.body
	parentScope := e.scope
	name := n.name
	takesVarargs, takesKwargs := n.varargs, n.kwargs

	call := func(args []Value, kwargs map[string]Value, order []string) (Value, error) {
		// Counted here, in the call, so a macro called by another name
		// (set g = f) nests no deeper than one called by its own.
		e.b.enter()
		defer e.b.leave()
		child := newScope(parentScope)

		// Bind positional args.
		for i, param := range params {
			if i < len(args) {
				child.set(param.name, args[i])
			} else if v, ok := kwargs[param.name]; ok {
				child.set(param.name, v)
			} else if param.defaultVal != nil {
				defEval := e.sub(child)
				defVal, err := defEval.evalExpr(param.defaultVal)
				if err != nil {
					return Undefined(), err
				}
				child.set(param.name, defVal)
			} else {
				child.set(param.name, Undefined())
			}
		}

		// Set caller if available.
		if caller, ok := kwargs["caller"]; ok {
			child.set("caller", caller)
		}

		// What the parameters do not take: varargs and kwargs, where the
		// body names them, else refused as jinja2 refuses it.
		var extra []Value
		if len(args) > len(params) {
			if !takesVarargs {
				return Undefined(), fmt.Errorf("macro %q takes not more than %d argument(s)", name, len(params))
			}
			extra = args[len(params):]
		}
		e.b.allocValues(len(extra) + len(kwargs))
		child.set("varargs", NewTuple(slices.Clone(extra)))
		kw := NewDict()
		for _, k := range kwOrder(kwargs, order) {
			if k == "caller" || slices.ContainsFunc(params, func(p macroParam) bool { return p.name == k }) {
				continue
			}
			if !takesKwargs {
				return Undefined(), fmt.Errorf("macro %q takes no keyword argument %q", name, k)
			}
			kw.AsDict().Set(k, kwargs[k])
		}
		child.set("kwargs", kw)

		macroEval := e.sub(child)

		if err := macroEval.execNodes(body); err != nil {
			return Undefined(), err
		}

		return NewString(macroEval.output.String()), nil
	}
	e.scope.set(n.name, Value{kind: KindCallable, v: Callable{
		Name: n.name,
		Fn:   func(args []Value, kwargs map[string]Value) (Value, error) { return call(args, kwargs, nil) },
		ordered: func(_ *budget, args []Value, kwargs map[string]Value, order []string) (Value, error) {
			return call(args, kwargs, order)
		},
	}})
	return nil
}

func (e *evaluator) execCall(n *callNode) error {
	// Create a caller callable that renders the body.
	callerArgs := n.callerArgs
	body := n.body
	parentScope := e.scope

	caller := NewCallable("caller", func(args []Value, kwargs map[string]Value) (Value, error) {
		e.b.enter()
		defer e.b.leave()
		child := newScope(parentScope)
		for i, argName := range callerArgs {
			if i < len(args) {
				child.set(argName, args[i])
			}
		}

		callerEval := e.sub(child)
		if err := callerEval.execNodes(body); err != nil {
			return Undefined(), err
		}
		return NewString(callerEval.output.String()), nil
	})

	// Evaluate the call expression with caller in kwargs.
	callEx, ok := n.expr.(*callExpr)
	if ok {
		fn, err := e.evalExpr(callEx.fn)
		if err != nil {
			return err
		}
		if !fn.IsCallable() {
			return fmt.Errorf("call: expression is not callable")
		}

		var args []Value
		for _, a := range callEx.args {
			av, err := e.evalExpr(a)
			if err != nil {
				return err
			}
			args = append(args, av)
		}

		kwargs, order, err := e.evalKwargs(callEx.kwargs)
		if err != nil {
			return err
		}
		if kwargs == nil {
			kwargs = map[string]Value{}
		}
		kwargs["caller"] = caller
		result, err := e.invoke(fn.AsCallable(), args, kwargs, append(order, "caller"))
		if err != nil {
			return err
		}
		e.output.WriteString(e.b.print(result))
		return nil
	}

	// Fallback: evaluate expression and call with caller.
	fn, err := e.evalExpr(n.expr)
	if err != nil {
		return err
	}
	if !fn.IsCallable() {
		return fmt.Errorf("call: expression is not callable")
	}

	result, err := e.invoke(fn.AsCallable(), nil, map[string]Value{"caller": caller}, nil)
	if err != nil {
		return err
	}
	e.output.WriteString(e.b.print(result))
	return nil
}

func (e *evaluator) execFilterBlock(n *filterBlockNode) error {
	// Render body to string.
	bodyEval := e.sub(e.scope)
	if err := bodyEval.execNodes(n.body); err != nil {
		return err
	}
	bodyStr := bodyEval.output.String()

	// Apply the filter. The filter expression should be a name or filter chain.
	if fe, ok := n.filter.(*nameExpr); ok {
		filterVal, ok := lookupFilter(e.builtins, fe.name)
		if !ok {
			return unknownFilter(fe.name)
		}
		result, err := e.invoke(filterVal.AsCallable(), []Value{NewString(bodyStr)}, nil, nil)
		if err != nil {
			return err
		}
		e.output.WriteString(e.b.print(result))
		return nil
	}

	// For more complex filter expressions, just output the body.
	e.output.WriteString(bodyStr)
	return nil
}

// =============================================================================
// Expression evaluation
// =============================================================================

func (e *evaluator) evalExpr(ex expr) (Value, error) {
	e.b.step()
	switch n := ex.(type) {
	case *litExpr:
		return n.val, nil

	case *nameExpr:
		v, _ := e.scope.get(n.name)
		return v, nil

	case *attrExpr:
		return e.evalAttr(n)

	case *itemExpr:
		return e.evalItem(n)

	case *sliceExpr:
		return e.evalSlice(n)

	case *unaryExpr:
		return e.evalUnary(n)

	case *binExpr:
		return e.evalBinary(n)

	case *condExpr:
		return e.evalCond(n)

	case *callExpr:
		return e.evalCallExpr(n)

	case *filterExpr:
		return e.evalFilter(n)

	case *testExpr:
		return e.evalTestExpr(n)

	case *chainExpr:
		return e.evalChain(n)

	case *listExpr:
		e.b.allocValues(len(n.items))
		items := make([]Value, len(n.items))
		for i, item := range n.items {
			v, err := e.evalExpr(item)
			if err != nil {
				return Undefined(), err
			}
			items[i] = v
		}
		if n.tuple {
			return NewTuple(items), nil
		}
		return NewList(items), nil

	case *dictExpr:
		d := NewDict()
		dict := d.AsDict()
		for _, pair := range n.pairs {
			key, err := e.evalExpr(pair.key)
			if err != nil {
				return Undefined(), err
			}
			val, err := e.evalExpr(pair.value)
			if err != nil {
				return Undefined(), err
			}
			k := e.b.print(key)
			e.b.alloc(int64(len(k)) + valueBytes)
			dict.Set(k, val)
		}
		return d, nil

	default:
		return Undefined(), fmt.Errorf("unknown expression type %T", ex)
	}
}

func (e *evaluator) evalAttr(n *attrExpr) (Value, error) {
	obj, err := e.evalExpr(n.obj)
	if err != nil {
		return Undefined(), err
	}

	// Dict attribute access.
	if obj.IsDict() {
		if v, ok := obj.AsDict().Get(n.attr); ok {
			return v, nil
		}

		// Dict methods.
		return e.dictMethod(obj, n.attr)
	}

	// String methods.
	if obj.IsString() {
		m, err := e.stringMethod(obj, n.attr)
		if obj.isMarkup() && m.IsCallable() {
			return markupMethod(e.b, m), err
		}
		return m, err
	}

	// List methods.
	if obj.IsList() {
		return e.listMethod(obj, n.attr)
	}

	return Undefined(), nil
}

func (e *evaluator) evalItem(n *itemExpr) (Value, error) {
	obj, err := e.evalExpr(n.obj)
	if err != nil {
		return Undefined(), err
	}

	key, err := e.evalExpr(n.key)
	if err != nil {
		return Undefined(), err
	}

	if obj.IsList() {
		idx := int(toInt64(key))
		list := obj.AsList()
		if idx < 0 {
			idx += list.Len()
		}
		if idx < 0 || idx >= list.Len() {
			return Undefined(), nil
		}
		return list.Get(idx), nil
	}

	if obj.IsDict() {
		k := e.b.print(key)
		if v, ok := obj.AsDict().Get(k); ok {
			return v, nil
		}
		return Undefined(), nil
	}

	if obj.IsString() {
		s := obj.AsString()
		e.b.scan(int64(len(s)))
		return runeAt(s, toInt64(key)), nil
	}

	return Undefined(), nil
}

func (e *evaluator) evalSlice(n *sliceExpr) (Value, error) {
	obj, err := e.evalExpr(n.obj)
	if err != nil {
		return Undefined(), err
	}

	if obj.IsList() {
		list := obj.AsList()
		length := list.Len()
		start, stop, step := resolveSlice(n, e, length)

		// Fast path for the overwhelmingly common step==1 case
		// (e.g. messages[1:] in chat templates). A single allocation
		// of the exact size avoids the geometric growth of append.
		// Aliasing the source slice would be unsafe because List.Append
		// could later mutate beyond Len() into the backing array.
		if step == 1 {
			if start < 0 {
				start = 0
			}
			if stop > length {
				stop = length
			}
			if start >= stop {
				return list.slice(nil), nil
			}
			e.b.allocValues(stop - start)
			items := make([]Value, stop-start)
			copy(items, list.Items[start:stop])
			return list.slice(items), nil
		}

		var items []Value
		if step > 0 {
			// Pre-size to the maximum possible iteration count to
			// avoid append's geometric growth allocations.
			count := (stop - start + step - 1) / step
			if count > 0 {
				e.b.allocValues(min(count, length))
				items = make([]Value, 0, min(count, length))
			}
			for i := start; i < stop; i += step {
				if i >= 0 && i < length {
					items = append(items, list.Items[i])
				}
			}
		} else if step < 0 {
			count := (start - stop - step - 1) / -step
			if count > 0 {
				e.b.allocValues(min(count, length))
				items = make([]Value, 0, min(count, length))
			}
			for i := start; i > stop; i += step {
				if i >= 0 && i < length {
					items = append(items, list.Items[i])
				}
			}
		}
		return list.slice(items), nil
	}

	if obj.IsString() {
		s := obj.AsString()

		// ASCII fast path. Most chat-template string slicing operates
		// on tag/role names or message content that is ASCII; for those
		// we can index by byte and skip the []rune conversion entirely.
		// This is the dominant cost in the kronk dense profile because
		// the system prompt can be tens of thousands of bytes.
		if isASCII(s) {
			length := len(s)
			start, stop, step := resolveSlice(n, e, length)

			if step == 1 {
				if start < 0 {
					start = 0
				}
				if stop > length {
					stop = length
				}
				if start >= stop {
					return NewString(""), nil
				}
				return NewString(s[start:stop]), nil
			}

			if step == -1 {
				if start >= length {
					start = length - 1
				}
				if stop < -1 {
					stop = -1
				}
				if start <= stop {
					return NewString(""), nil
				}
				e.b.alloc(int64(start - stop))
				buf := make([]byte, 0, start-stop)
				for i := start; i > stop; i-- {
					buf = append(buf, s[i])
				}
				return NewString(string(buf)), nil
			}
			// Fall through to the general path for unusual steps.
		}

		e.b.allocRunes(s)
		runes := []rune(s)
		length := len(runes)
		start, stop, step := resolveSlice(n, e, length)
		var result []rune
		if step > 0 {
			for i := start; i < stop; i += step {
				if i >= 0 && i < length {
					result = append(result, runes[i])
				}
			}
		} else if step < 0 {
			for i := start; i > stop; i += step {
				if i >= 0 && i < length {
					result = append(result, runes[i])
				}
			}
		}
		return NewString(string(result)), nil
	}

	return Undefined(), nil
}

// runeAt is s[idx] by code point, as Python indexes a str (a negative
// idx counts from the end), or Undefined out of range. It walks s rather
// than converting it, so indexing a long string allocates nothing.
func runeAt(s string, idx int64) Value {
	if idx < 0 {
		idx += int64(utf8.RuneCountInString(s))
	}
	if idx < 0 {
		return Undefined()
	}
	for _, r := range s {
		if idx == 0 {
			return NewString(string(r))
		}
		idx--
	}
	return Undefined()
}

// isASCII reports whether s contains only 7-bit ASCII bytes. Used to
// skip the []rune conversion in evalSlice's string branch when byte
// indexing produces the same result as code-point indexing.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// resolveSlice is the slice's start, stop and step, clamped as Python
// clamps them to the sequence, so that a loop from start to stop visits
// only indexes inside it however large the template's bounds.
func resolveSlice(n *sliceExpr, e *evaluator, length int) (int, int, int) {
	start, stop, step := sliceBounds(n, e, length)
	if step > 0 { // a step past the end takes one item, as any longer one would
		return min(max(start, 0), length), min(max(stop, 0), length), min(step, length+1)
	}
	return min(max(start, -1), length-1), min(max(stop, -1), length-1), max(step, -length-1)
}

func sliceBounds(n *sliceExpr, e *evaluator, length int) (int, int, int) {
	step := 1
	if n.step != nil {
		v, _ := e.evalExpr(n.step)
		step = int(toInt64(v))
		if step == 0 {
			step = 1
		}
	}

	var start, stop int

	if step > 0 {
		start = 0
		stop = length
	} else {
		start = length - 1
		stop = -length - 1
	}

	if n.start != nil {
		v, _ := e.evalExpr(n.start)
		start = int(toInt64(v))
		if start < 0 {
			start += length
		}
	}

	if n.stop != nil {
		v, _ := e.evalExpr(n.stop)
		stop = int(toInt64(v))
		if stop < 0 {
			stop += length
		}
	}

	return start, stop, step
}

func (e *evaluator) evalUnary(n *unaryExpr) (Value, error) {
	operand, err := e.evalExpr(n.operand)
	if err != nil {
		return Undefined(), err
	}

	switch n.op {
	case "not":
		return NewBool(!operand.IsTruthy()), nil
	case "-":
		if isIntegral(operand) {
			return intNeg(operand), nil
		}
		if operand.IsFloat() {
			return NewFloat(-operand.AsFloat()), nil
		}
		return Undefined(), fmt.Errorf("bad operand type for unary -: '%s'", typeName(operand))
	case "+":
		if isIntegral(operand) {
			return intValue(operand), nil // an int: +True is 1
		}
		if operand.IsFloat() {
			return operand, nil
		}
		return Undefined(), fmt.Errorf("bad operand type for unary +: '%s'", typeName(operand))
	}

	return Undefined(), fmt.Errorf("unknown unary operator %q", n.op)
}

func (e *evaluator) evalBinary(n *binExpr) (Value, error) {
	// Short-circuit for and/or.
	if n.op == "and" {
		left, err := e.evalExpr(n.left)
		if err != nil {
			return Undefined(), err
		}
		if !left.IsTruthy() {
			return left, nil
		}
		return e.evalExpr(n.right)
	}

	if n.op == "or" {
		left, err := e.evalExpr(n.left)
		if err != nil {
			return Undefined(), err
		}
		if left.IsTruthy() {
			return left, nil
		}
		return e.evalExpr(n.right)
	}

	left, err := e.evalExpr(n.left)
	if err != nil {
		return Undefined(), err
	}

	right, err := e.evalExpr(n.right)
	if err != nil {
		return Undefined(), err
	}

	switch n.op {
	case "+", "-", "*", "/", "//", "%", "**":
		if err := checkArith(n.op, left, right); err != nil {
			return Undefined(), err
		}
	}

	switch n.op {
	case "+":
		return addValues(e.b, left, right)
	case "-":
		return subValues(e.b, left, right)
	case "*":
		return mulValues(e.b, left, right)
	case "/":
		return divValues(left, right)
	case "//":
		return floorDivValues(e.b, left, right)
	case "%":
		if left.IsString() {
			if left.isMarkup() {
				right = escapeArgs(e.b, right) // Markup % escapes its arguments
			}
			s, err := pyPercent(e.b, left.AsString(), right)
			if err != nil {
				return Undefined(), err
			}
			if left.isMarkup() {
				return newMarkup(s), nil
			}
			return NewString(s), nil
		}
		return modValues(e.b, left, right)
	case "**":
		return powValues(e.b, left, right)
	case "~":
		return concat(e.b, left, e.b.print(left), e.b.print(right)), nil
	case "==", "!=", "<", ">", "<=", ">=", "in", "not in":
		return NewBool(e.holds(n.op, left, right)), nil
	}

	return Undefined(), fmt.Errorf("unknown binary operator %q", n.op)
}

// holds reports whether left op right, for a comparison op.
func (e *evaluator) holds(op string, left, right Value) bool {
	switch op {
	case "==":
		return valuesEqual(e.b, left, right)
	case "!=":
		return !valuesEqual(e.b, left, right)
	case "<":
		return compareValues(e.b, left, right) < 0
	case ">":
		return compareValues(e.b, left, right) > 0
	case "<=":
		return compareValues(e.b, left, right) <= 0
	case ">=":
		return compareValues(e.b, left, right) >= 0
	case "in":
		return containsValue(e.b, right, left)
	default: // "not in"
		return !containsValue(e.b, right, left)
	}
}

// evalChain is a run of comparisons: false at the first that fails, the
// operands after it not evaluated, as Python's.
func (e *evaluator) evalChain(n *chainExpr) (Value, error) {
	left, err := e.evalExpr(n.first)
	if err != nil {
		return Undefined(), err
	}
	for i, op := range n.ops {
		right, err := e.evalExpr(n.rest[i])
		if err != nil {
			return Undefined(), err
		}
		if !e.holds(op, left, right) {
			return NewBool(false), nil
		}
		left = right
	}
	return NewBool(true), nil
}

func (e *evaluator) evalCond(n *condExpr) (Value, error) {
	cond, err := e.evalExpr(n.condition)
	if err != nil {
		return Undefined(), err
	}

	if cond.IsTruthy() {
		return e.evalExpr(n.trueExpr)
	}

	if n.falseExpr != nil {
		return e.evalExpr(n.falseExpr)
	}

	return Undefined(), nil
}

func (e *evaluator) evalCallExpr(n *callExpr) (Value, error) {
	fn, err := e.evalExpr(n.fn)
	if err != nil {
		return Undefined(), err
	}

	if fn.IsDict() {
		if c, ok := fn.AsDict().Get(loopCall); ok {
			fn = c // a recursive loop's loop(items)
		}
	}
	if !fn.IsCallable() {
		return Undefined(), fmt.Errorf("%s is not callable: %s", callableName(n.fn), e.b.repr(fn))
	}

	args := make([]Value, len(n.args))
	for i, a := range n.args {
		v, err := e.evalExpr(a)
		if err != nil {
			return Undefined(), err
		}
		args[i] = v
	}

	kwargs, order, err := e.evalKwargs(n.kwargs)
	if err != nil {
		return Undefined(), err
	}
	return e.invoke(fn.AsCallable(), args, kwargs, order)
}

func callableName(ex expr) string {
	switch n := ex.(type) {
	case *nameExpr:
		return n.name

	case *attrExpr:
		return callableName(n.obj) + "." + n.attr

	case *itemExpr:
		return callableName(n.obj) + "[item]"

	default:
		return ex.nodeType()
	}
}

func (e *evaluator) evalFilter(n *filterExpr) (Value, error) {
	input, err := e.evalExpr(n.expr)
	if err != nil {
		return Undefined(), err
	}

	if n.name == "attr" {
		return e.attrFilter(input, n)
	}

	// Look up filter in builtins.
	filterVal, ok := lookupFilter(e.builtins, n.name)
	if !ok {
		// Also check scope for user-defined filters.
		filterVal, ok = e.scope.get(n.name)
		if !ok {
			return Undefined(), unknownFilter(n.name)
		}
	}

	if !filterVal.IsCallable() {
		return Undefined(), fmt.Errorf("filter %q is not callable", n.name)
	}

	// Build args: input as first, then additional args.
	args := make([]Value, 1+len(n.args))
	args[0] = input
	for i, a := range n.args {
		v, err := e.evalExpr(a)
		if err != nil {
			return Undefined(), err
		}
		args[i+1] = v
	}

	kwargs, order, err := e.evalKwargs(n.kwargs)
	if err != nil {
		return Undefined(), err
	}
	if n.name == "map" && len(args) > 1 && args[1].IsString() && input.IsList() {
		return e.mapFilter(input.AsList(), args[1].AsString(), args[2:], kwargs)
	}
	return e.invoke(filterVal.AsCallable(), args, kwargs, order)
}

// attrFilter is jinja2's attr(name): input's attribute, never its item (a
// dict's keys are items, its methods attributes): the methods of strings,
// lists and dicts; anything else undefined.
func (e *evaluator) attrFilter(input Value, n *filterExpr) (Value, error) {
	if len(n.args) != 1 || len(n.kwargs) != 0 {
		return Undefined(), fmt.Errorf("attr: takes one attribute name")
	}
	name, err := e.evalExpr(n.args[0])
	if err != nil {
		return Undefined(), err
	}
	if !name.IsString() {
		return Undefined(), fmt.Errorf("attr: the attribute name must be a string, not %s", e.b.repr(name))
	}
	switch {
	case input.IsDict():
		return e.dictMethod(input, name.AsString())
	case input.IsString():
		return e.stringMethod(input, name.AsString())
	case input.IsList():
		return e.listMethod(input, name.AsString())
	}
	return Undefined(), nil
}

// mapFilter is map('name', args...): the filter name applied to each
// item with args (the builtin map takes only attribute=).
func (e *evaluator) mapFilter(list *List, name string, args []Value, kwargs map[string]Value) (Value, error) {
	f, ok := lookupFilter(e.builtins, name)
	if !ok {
		return Undefined(), fmt.Errorf("map: %w", unknownFilter(name))
	}
	e.b.allocValues(list.Len())
	items := make([]Value, list.Len())
	for i, item := range list.Items {
		e.b.step()
		v, err := e.invoke(f.AsCallable(), append([]Value{item}, args...), kwargs, nil)
		if err != nil {
			return Undefined(), err
		}
		items[i] = v
	}
	return NewList(items), nil
}

func (e *evaluator) evalTestExpr(n *testExpr) (Value, error) {
	val, err := e.evalExpr(n.expr)
	if err != nil {
		return Undefined(), err
	}

	var testArgs []Value
	for _, a := range n.args {
		v, err := e.evalExpr(a)
		if err != nil {
			return Undefined(), err
		}
		testArgs = append(testArgs, v)
	}

	result, err := evalTest(e.b, n.name, val, testArgs)
	if err != nil {
		return Undefined(), err
	}

	if n.negated {
		result = !result
	}

	return NewBool(result), nil
}

// =============================================================================
// String methods
// =============================================================================

func (e *evaluator) stringMethod(obj Value, method string) (Value, error) {
	s := obj.AsString()
	b := e.b
	b.scan(int64(len(s))) // every method reads s once, at least

	switch method {
	case "strip":
		return e.makeStringFunc("strip", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) > 0 {
				return NewString(strings.Trim(s, b.print(args[0]))), nil
			}
			return NewString(strings.TrimSpace(s)), nil
		}), nil

	case "lstrip":
		return e.makeStringFunc("lstrip", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) > 0 {
				return NewString(strings.TrimLeft(s, b.print(args[0]))), nil
			}
			return NewString(strings.TrimLeftFunc(s, func(r rune) bool {
				return r == ' ' || r == '\t' || r == '\n' || r == '\r'
			})), nil
		}), nil

	case "rstrip":
		return e.makeStringFunc("rstrip", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) > 0 {
				return NewString(strings.TrimRight(s, b.print(args[0]))), nil
			}
			return NewString(strings.TrimRightFunc(s, func(r rune) bool {
				return r == ' ' || r == '\t' || r == '\n' || r == '\r'
			})), nil
		}), nil

	case "split":
		return e.makeStringFunc("split", func(args []Value, kwargs map[string]Value) (Value, error) {
			b.alloc(int64(len(s)))
			if len(args) == 0 {
				parts := strings.Fields(s)
				b.allocValues(len(parts))
				items := make([]Value, len(parts))
				for i, p := range parts {
					items[i] = NewString(p)
				}
				return NewList(items), nil
			}
			sep := b.print(args[0])
			if sep == "" {
				return Undefined(), fmt.Errorf("split: empty separator")
			}
			n := strings.Count(s, sep) + 1
			if len(args) > 1 { // maxsplit: at most that many cuts (Python's)
				if m := toInt64(args[1]); m >= 0 && m < int64(n-1) {
					n = int(m) + 1
				}
			}
			b.allocValues(n)
			parts := strings.SplitN(s, sep, n)
			items := make([]Value, len(parts))
			for i, p := range parts {
				items[i] = NewString(p)
			}
			return NewList(items), nil
		}), nil

	case "startswith":
		return e.makeStringFunc("startswith", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return NewBool(false), nil
			}
			return NewBool(hasAny(b, s, args[0], strings.HasPrefix)), nil
		}), nil

	case "endswith":
		return e.makeStringFunc("endswith", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return NewBool(false), nil
			}
			return NewBool(hasAny(b, s, args[0], strings.HasSuffix)), nil
		}), nil

	case "replace":
		return e.makeStringFunc("replace", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) < 2 {
				return NewString(s), nil
			}
			old := b.print(args[0])
			newStr := b.print(args[1])
			count := -1
			if len(args) > 2 {
				count = int(toInt64(args[2]))
			}
			b.alloc(replacedSize(s, old, newStr, count))
			return NewString(strings.Replace(s, old, newStr, count)), nil
		}), nil

	case "upper", "lower", "title", "capitalize":
		change := map[string]func(string) string{"upper": pyUpper, "lower": pyLower, "title": pyTitle, "capitalize": pyCapitalize}[method]
		return e.makeStringFunc(method, func(args []Value, kwargs map[string]Value) (Value, error) {
			b.allocCased(s)
			return NewString(change(s)), nil
		}), nil

	case "count":
		return e.makeStringFunc("count", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return NewInt(0), nil
			}
			return NewInt(int64(strings.Count(s, b.print(args[0])))), nil
		}), nil

	case "find":
		return e.makeStringFunc("find", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return NewInt(-1), nil
			}
			// Python counts code points, not bytes.
			i := strings.Index(s, b.print(args[0]))
			if i > 0 {
				i = utf8.RuneCountInString(s[:i])
			}
			return NewInt(int64(i)), nil
		}), nil

	case "format":
		return e.makeStringFunc("format", func(args []Value, kwargs map[string]Value) (Value, error) {
			out, err := strFormat(b, s, args, kwargs)
			if err != nil {
				return Undefined(), err
			}
			return NewString(out), nil
		}), nil
	}

	if fn, ok := strMethods[method]; ok {
		return e.makeStringFunc(method, func(args []Value, kwargs map[string]Value) (Value, error) {
			return fn(b, s, args)
		}), nil
	}
	return Undefined(), nil
}

// hasAny is has(s, arg), or for a tuple (a list here) of candidates,
// has(s, c) for any of them, as Python's startswith and endswith take.
func hasAny(b *budget, s string, arg Value, has func(s, affix string) bool) bool {
	if !arg.IsList() {
		return has(s, b.print(arg))
	}
	for _, c := range arg.AsList().Items {
		if has(s, b.print(c)) {
			return true
		}
	}
	return false
}

func (e *evaluator) makeStringFunc(name string, fn func([]Value, map[string]Value) (Value, error)) Value {
	return NewCallable("str."+name, fn)
}

// =============================================================================
// List methods
// =============================================================================

func (e *evaluator) listMethod(obj Value, method string) (Value, error) {
	list := obj.AsList()
	if i := slices.Index(list.Fields, method); i >= 0 && i < len(list.Items) {
		return list.Items[i], nil
	}
	switch method {
	case "count":
		return NewCallable(method, func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) != 1 || len(kwargs) != 0 {
				return Undefined(), fmt.Errorf("count() takes exactly one argument")
			}
			e.b.scan(size(list.Len(), valueBytes))
			n := 0
			for _, it := range list.Items {
				if e.b.equal(it, args[0], 0) {
					n++
				}
			}
			return NewInt(int64(n)), nil
		}), nil
	case "index":
		return NewCallable(method, func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) < 1 || len(args) > 3 || len(kwargs) != 0 {
				return Undefined(), fmt.Errorf("index() takes from 1 to 3 positional arguments")
			}
			// start and end as a slice's bounds: negative from the end.
			bound := func(i int, def int) int {
				if i >= len(args) {
					return def
				}
				v := int(toInt64(args[i]))
				if v < 0 {
					v += list.Len()
				}
				return min(max(v, 0), list.Len())
			}
			from, to := bound(1, 0), bound(2, list.Len())
			e.b.scan(size(max(to-from, 0), valueBytes))
			for i := from; i < to; i++ {
				if e.b.equal(list.Items[i], args[0], 0) {
					return NewInt(int64(i)), nil
				}
			}
			if list.Tuple {
				return Undefined(), fmt.Errorf("tuple.index(x): x not in tuple")
			}
			return Undefined(), fmt.Errorf("%s is not in list", e.b.repr(args[0]))
		}), nil
	}
	if list.Tuple {
		return Undefined(), nil // a tuple has no methods that change it
	}

	switch method {
	case "append":
		return NewCallable("list.append", func(args []Value, kwargs map[string]Value) (Value, error) {
			e.b.allocValues(1)
			if len(args) > 0 {
				list.Append(args[0])
			}
			return None(), nil
		}), nil

	case "pop":
		return NewCallable("list.pop", func(args []Value, kwargs map[string]Value) (Value, error) {
			if list.Len() == 0 {
				return Undefined(), fmt.Errorf("pop from empty list")
			}
			idx := list.Len() - 1
			if len(args) > 0 {
				idx = int(toInt64(args[0]))
				if idx < 0 {
					idx += list.Len()
				}
			}
			if idx < 0 || idx >= list.Len() {
				return Undefined(), fmt.Errorf("pop index out of range")
			}
			e.b.scan(size(list.Len()-idx, valueBytes))
			val := list.Items[idx]
			list.Items = append(list.Items[:idx], list.Items[idx+1:]...)
			return val, nil
		}), nil

	case "insert":
		return NewCallable("list.insert", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) < 2 {
				return None(), nil
			}
			idx := min(max(int(toInt64(args[0])), 0), list.Len())
			e.b.allocValues(1)
			e.b.scan(size(list.Len()-idx, valueBytes))
			list.Items = append(list.Items, Undefined())
			copy(list.Items[idx+1:], list.Items[idx:])
			list.Items[idx] = args[1]
			return None(), nil
		}), nil
	}

	return Undefined(), nil
}

// =============================================================================
// Dict methods
// =============================================================================

func (e *evaluator) dictMethod(obj Value, method string) (Value, error) {
	d := obj.AsDict()
	b := e.b

	switch method {
	case "items":
		return NewCallable("dict.items", func(args []Value, kwargs map[string]Value) (Value, error) {
			return dictItems(b, d), nil
		}), nil

	case "keys":
		return NewCallable("dict.keys", func(args []Value, kwargs map[string]Value) (Value, error) {
			b.allocValues(d.Len())
			items := make([]Value, 0, d.Len())
			for _, key := range d.Keys {
				items = append(items, NewString(key))
			}
			return NewList(items), nil
		}), nil

	case "values":
		return NewCallable("dict.values", func(args []Value, kwargs map[string]Value) (Value, error) {
			b.allocValues(d.Len())
			items := make([]Value, 0, d.Len())
			for _, key := range d.Keys {
				items = append(items, d.Data[key])
			}
			return NewList(items), nil
		}), nil

	case "get":
		return NewCallable("dict.get", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return Undefined(), nil
			}
			key := b.print(args[0])
			if v, ok := d.Get(key); ok {
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return None(), nil
		}), nil

	case "pop":
		return NewCallable("dict.pop", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) == 0 {
				return Undefined(), nil
			}
			key := b.print(args[0])
			v, ok := d.Get(key)
			if ok {
				b.allocValues(d.Len())
				delete(d.Data, key)
				newKeys := make([]string, 0, len(d.Keys)-1)
				for _, k := range d.Keys {
					if k != key {
						newKeys = append(newKeys, k)
					}
				}
				d.Keys = newKeys
				return v, nil
			}
			if len(args) > 1 {
				return args[1], nil
			}
			return Undefined(), nil
		}), nil

	case "update":
		return NewCallable("dict.update", func(args []Value, kwargs map[string]Value) (Value, error) {
			if len(args) > 0 && args[0].IsDict() {
				other := args[0].AsDict()
				b.allocValues(other.Len())
				for _, key := range other.Keys {
					d.Set(key, other.Data[key])
				}
			}
			return None(), nil
		}), nil
	}

	return Undefined(), nil
}

// =============================================================================
// Arithmetic helpers
// =============================================================================

func addValues(bud *budget, a, b Value) (Value, error) {
	if a.IsString() || b.IsString() {
		l, r := bud.print(a), bud.print(b)
		if a.isMarkup() || b.isMarkup() {
			// Markup + str escapes the str (markupsafe's __add__ and
			// __radd__), and is Markup.
			if !a.isMarkup() {
				l = htmlEscape(bud, l)
			}
			if !b.isMarkup() {
				r = htmlEscape(bud, r)
			}
			bud.alloc(int64(len(l)) + int64(len(r)))
			return newMarkup(l + r), nil
		}
		return concat(bud, a, l, r), nil
	}
	if a.IsList() && b.IsList() {
		if a.AsList().Tuple != b.AsList().Tuple {
			return Undefined(), fmt.Errorf("can only concatenate %s (not %q) to %s", typeName(a), typeName(b), typeName(a))
		}
		bud.allocValues(a.AsList().Len() + b.AsList().Len())
		items := make([]Value, 0, a.AsList().Len()+b.AsList().Len())
		items = append(items, a.AsList().Items...)
		items = append(items, b.AsList().Items...)
		return a.AsList().slice(items), nil
	}
	if a.IsFloat() || b.IsFloat() {
		return NewFloat(toFloat64(a) + toFloat64(b)), nil
	}
	return intArith(bud, "+", intOperand(a), intOperand(b))
}

// intOperand is v where integer arithmetic takes it: an int, or a bool
// (Python's are ints); anything else counts as its toInt64, as this
// engine has always counted it.
func intOperand(v Value) Value {
	if isIntegral(v) {
		return v
	}
	return NewInt(toInt64(v))
}

func subValues(bud *budget, a, b Value) (Value, error) {
	if a.IsFloat() || b.IsFloat() {
		return NewFloat(toFloat64(a) - toFloat64(b)), nil
	}
	return intArith(bud, "-", intOperand(a), intOperand(b))
}

func mulValues(bud *budget, a, b Value) (Value, error) {
	// A bool counts as the int it is: 'ab' * True is 'ab'.
	a, b = intValue(a), intValue(b)
	if a.IsInt() && (b.IsString() || b.IsList()) {
		a, b = b, a // 3 * 'ab' is 'ab' * 3
	}
	if a.IsList() && b.IsInt() {
		n := int(min(max(b.AsInt(), 0), math.MaxInt32))
		items := a.AsList().Items
		if len(items) == 0 {
			return a.AsList().slice(nil), nil
		}
		bud.allocValues(int(min(size(len(items), n), math.MaxInt32)))
		out := make([]Value, 0, len(items)*n)
		for range n {
			out = append(out, items...)
		}
		return a.AsList().slice(out), nil
	}
	if a.IsString() && b.IsInt() {
		n := max(b.AsInt(), 0) // Python repeats a string a negative number of times as ""
		bud.alloc(size(len(a.AsString()), int(min(n, math.MaxInt32))))
		return NewString(strings.Repeat(a.AsString(), int(n))), nil
	}
	if a.IsFloat() || b.IsFloat() {
		return NewFloat(toFloat64(a) * toFloat64(b)), nil
	}
	return intArith(bud, "*", intOperand(a), intOperand(b))
}

func divValues(a, b Value) (Value, error) {
	bf := toFloat64(b)
	if bf == 0 {
		return Undefined(), fmt.Errorf("/: %w", errZeroDivision)
	}
	return NewFloat(toFloat64(a) / bf), nil
}

// errZeroDivision is Python's ZeroDivisionError: /, // or % by zero
// (the engine had given 0).
var errZeroDivision = errors.New("division by zero")

// checkArith is Python's TypeError for an arithmetic operator on operands
// it does not take, which jinja2 raises: numbers (bools among them) take
// any; + also joins two strings or two sequences, * repeats a string or
// a sequence an int number of times, and % formats a string. The engine
// had computed something (1 + "a" was "1a", "a" + none was "aNone").
//
// An undefined operand is let through, as the engine has always let it
// (empty in a string, 0 in a sum), where jinja2 raises: templates add
// optional fields unguarded (Hermes-2-Pro adds a tool's description,
// which OpenAI's API leaves optional), and failing such a request helps
// no one.
func checkArith(op string, a, b Value) error {
	num := func(v Value) bool { return v.IsNumber() || v.IsBool() }
	if num(a) && num(b) || a.IsUndefined() || b.IsUndefined() {
		return nil
	}
	switch op {
	case "+":
		if a.IsString() && b.IsString() || a.IsList() && b.IsList() {
			return nil
		}
	case "*":
		seq := func(v Value) bool { return v.IsString() || v.IsList() }
		count := func(v Value) bool { return v.IsInt() || v.IsBool() }
		if seq(a) && count(b) || count(a) && seq(b) {
			return nil
		}
	case "%":
		if a.IsString() {
			return nil
		}
	}
	return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(a), typeName(b))
}

// floorDivValues is Python's //: it floors, toward negative infinity
// (-7 // 2 is -4), and is a float when either side is.
func floorDivValues(bud *budget, a, b Value) (Value, error) {
	if a.IsFloat() || b.IsFloat() {
		bf := toFloat64(b)
		if bf == 0 {
			return Undefined(), fmt.Errorf("//: %w", errZeroDivision)
		}
		return NewFloat(math.Floor(toFloat64(a) / bf)), nil
	}
	return intArith(bud, "//", intOperand(a), intOperand(b))
}

// modValues is Python's %: the remainder takes the divisor's sign
// (-7 % 3 is 2), and is a float when either side is.
func modValues(bud *budget, a, b Value) (Value, error) {
	if a.IsFloat() || b.IsFloat() {
		bf := toFloat64(b)
		if bf == 0 {
			return Undefined(), fmt.Errorf("%%: %w", errZeroDivision)
		}
		r := math.Mod(toFloat64(a), bf)
		if r != 0 && (r < 0) != (bf < 0) {
			r += bf
		}
		return NewFloat(r), nil
	}
	return intArith(bud, "%", intOperand(a), intOperand(b))
}

// powValues is Python's **: an integer to a non-negative integer power is
// an integer, exactly; otherwise a float.
func powValues(bud *budget, a, b Value) (Value, error) {
	if isIntegral(a) && isIntegral(b) && intCmp(b, NewInt(0)) >= 0 {
		return intArith(bud, "**", a, b)
	}
	return NewFloat(math.Pow(toFloat64(a), toFloat64(b))), nil
}

func valuesEqual(bud *budget, a, b Value) bool {
	// Cross-type numeric comparison; integers exactly.
	if isIntegral(a) && isIntegral(b) && (a.IsInt() || b.IsInt()) {
		return intCmp(a, b) == 0
	}
	if a.IsNumber() && b.IsNumber() {
		return toFloat64(a) == toFloat64(b)
	}
	// None == None.
	if a.IsNone() && b.IsNone() {
		return true
	}
	return bud.equal(a, b, 0)
}

// escapeArgs is v with its strings escaped (and marked safe), as Markup's
// % escapes its arguments: v itself, a tuple's items or a dict's values.
func escapeArgs(b *budget, v Value) Value {
	esc := func(x Value) Value {
		if x.IsString() && !x.isMarkup() {
			return newMarkup(htmlEscape(b, x.AsString()))
		}
		return x
	}
	switch {
	case v.IsList() && v.AsList().Tuple:
		items := make([]Value, len(v.AsList().Items))
		for i, it := range v.AsList().Items {
			items[i] = esc(it)
		}
		return NewTuple(items)
	case v.IsDict():
		d := NewDict()
		src := v.AsDict()
		for _, k := range src.Keys {
			d.AsDict().Set(k, esc(src.Data[k]))
		}
		return d
	}
	return esc(v)
}

// markupEscapes are the str methods a Markup escapes arguments of
// (markupsafe 3's): the position of the one it escapes (replace's new,
// the justifiers' fill character), or −1 for all (format, and join's
// items); the others take theirs as they are.
var markupEscapes = map[string]int{"format": -1, "join": -1, "replace": 1, "center": 1, "ljust": 1, "rjust": 1}

// markupMethod is a str method of a Markup: what it returns as a string
// is marked safe too, and a list of strings (split) a list of them, as
// markupsafe's overrides return Markup; markupEscapes says which
// arguments it escapes.
func markupMethod(b *budget, m Value) Value {
	c := m.AsCallable()
	fn := c.Fn
	return NewCallable(c.Name, func(args []Value, kwargs map[string]Value) (Value, error) {
		method := strings.TrimPrefix(c.Name, "str.")
		if esc, ok := markupEscapes[method]; ok { // what it is given, escaped
			args = slices.Clone(args)
			for i, a := range args {
				switch {
				case esc >= 0 && i != esc:
				case method == "join" && a.IsList():
					items := slices.Clone(a.AsList().Items)
					for j, it := range items {
						items[j] = escapeArgs(b, it)
					}
					args[i] = a.AsList().slice(items)
				default:
					args[i] = escapeArgs(b, a)
				}
			}
			if esc < 0 {
				kw := make(map[string]Value, len(kwargs))
				for k, a := range kwargs {
					kw[k] = escapeArgs(b, a)
				}
				kwargs = kw
			}
		}
		v, err := fn(args, kwargs)
		switch {
		case err != nil:
			return v, err
		case v.IsString():
			return newMarkup(v.AsString()), nil
		case v.IsList():
			items := slices.Clone(v.AsList().Items)
			for i, it := range items {
				if it.IsString() {
					items[i] = newMarkup(it.AsString())
				}
			}
			return v.AsList().slice(items), nil
		}
		return v, nil
	})
}
