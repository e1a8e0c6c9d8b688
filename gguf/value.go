package gguf

import (
	"fmt"
	"math"
	"strings"
)

// ValueType is the type tag of a metadata value (gguf_type).
type ValueType uint32

// The GGUF value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(t))
}

// size is the encoded size of a scalar of type t, 0 for string and array.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

func (t ValueType) valid() bool { return t <= TypeFloat64 }

func (t ValueType) isInt() bool {
	switch t {
	case TypeUint8, TypeInt8, TypeUint16, TypeInt16, TypeUint32, TypeInt32, TypeUint64, TypeInt64:
		return true
	}
	return false
}

// Value is one metadata value: a scalar, a string, or an array (possibly of
// arrays). The zero Value is invalid. Values are immutable; slices returned
// by the accessors alias the Value's storage and must not be modified.
type Value struct {
	kind uint8     // the ValueType plus one, so the zero Value is no type
	elem ValueType // element type of an array
	num  uint64    // integers (two's complement), bool (0/1), or the float's own bits
	str  string
	// arr holds an array as a Go slice of the element type: []uint8, []int8,
	// []uint16, []int16, []uint32, []int32, []float32, []bool, []string,
	// []uint64, []int64, []float64, or []Value for arrays of arrays.
	arr any
}

// Type is the value's GGUF type.
func (v Value) Type() ValueType { return v.typ() }

// IsValid reports whether v holds a value (the zero Value does not).
func (v Value) IsValid() bool { return v.kind != 0 }

func (v Value) typ() ValueType {
	if v.kind == 0 {
		return invalidType
	}
	return ValueType(v.kind - 1)
}

func kindOf(t ValueType) uint8 { return uint8(t) + 1 }

// invalidType is what the zero Value reports; no accessor accepts it.
const invalidType ValueType = 255

// ElemType is the element type of an array value.
func (v Value) ElemType() ValueType { return v.elem }

// Len is the number of elements of an array value, 0 otherwise.
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Interface returns the value as a Go value: the scalar's own Go type
// (uint8 ... float64, bool, string) or, for an array, the slice types listed
// on Value (aliased, not copied).
func (v Value) Interface() any {
	switch v.typ() {
	case TypeUint8:
		return uint8(v.num)
	case TypeInt8:
		return int8(v.num)
	case TypeUint16:
		return uint16(v.num)
	case TypeInt16:
		return int16(v.num)
	case TypeUint32:
		return uint32(v.num)
	case TypeInt32:
		return int32(v.num)
	case TypeFloat32:
		return math.Float32frombits(uint32(v.num))
	case TypeBool:
		return v.num != 0
	case TypeString:
		return v.str
	case TypeUint64:
		return v.num
	case TypeInt64:
		return int64(v.num)
	case TypeFloat64:
		return math.Float64frombits(v.num)
	case TypeArray:
		return v.arr
	}
	return nil
}

// AsString returns a string value.
func (v Value) AsString() (string, bool) { return v.str, v.typ() == TypeString }

// AsBool returns a bool value.
func (v Value) AsBool() (bool, bool) { return v.num != 0, v.typ() == TypeBool }

// AsUint64 returns an integer value of any width that is not negative.
func (v Value) AsUint64() (uint64, bool) {
	if !v.typ().isInt() {
		return 0, false
	}
	if isSigned(v.typ()) && int64(v.num) < 0 {
		return 0, false
	}
	return v.num, true
}

// AsInt64 returns an integer value of any width that fits in an int64.
func (v Value) AsInt64() (int64, bool) {
	if !v.typ().isInt() {
		return 0, false
	}
	if v.typ() == TypeUint64 && v.num > math.MaxInt64 {
		return 0, false
	}
	return int64(v.num), true
}

// AsFloat64 returns a float32 or float64 value.
func (v Value) AsFloat64() (float64, bool) {
	switch v.typ() {
	case TypeFloat32:
		return float64(math.Float32frombits(uint32(v.num))), true
	case TypeFloat64:
		return math.Float64frombits(v.num), true
	}
	return 0, false
}

// Strings returns an array of strings (aliased).
func (v Value) Strings() ([]string, bool) { a, ok := v.arr.([]string); return a, ok }

// Values returns an array of arrays (aliased).
func (v Value) Values() ([]Value, bool) { a, ok := v.arr.([]Value); return a, ok }

// Float32s returns an array of float32 (aliased), or a float64 array
// converted to float32.
func (v Value) Float32s() ([]float32, bool) {
	switch a := v.arr.(type) {
	case []float32:
		return a, true
	case []float64:
		out := make([]float32, len(a))
		for i, x := range a {
			out[i] = float32(x)
		}
		return out, true
	}
	return nil, false
}

// Int32s returns an array of int32 (aliased), or an array of another integer
// type converted when every element fits in an int32.
func (v Value) Int32s() ([]int32, bool) {
	if a, ok := v.arr.([]int32); ok {
		return a, true
	}
	return convertInts[int32](v, math.MinInt32, math.MaxInt32)
}

// Uint32s returns an array of uint32 (aliased), or an array of another
// integer type converted when every element fits in a uint32.
func (v Value) Uint32s() ([]uint32, bool) {
	if a, ok := v.arr.([]uint32); ok {
		return a, true
	}
	return convertInts[uint32](v, 0, math.MaxUint32)
}

// Int64s returns any integer array as int64, when every element fits.
func (v Value) Int64s() ([]int64, bool) {
	if a, ok := v.arr.([]int64); ok {
		return a, true
	}
	return convertInts[int64](v, math.MinInt64, math.MaxInt64)
}

func convertInts[T int32 | uint32 | int64](v Value, lo int64, hi uint64) ([]T, bool) {
	n := v.Len()
	if v.typ() != TypeArray || !v.elem.isInt() {
		return nil, false
	}
	out := make([]T, n)
	for i := range n {
		e := v.index(i)
		if isSigned(v.elem) {
			x := int64(e)
			if x < lo || (x > 0 && uint64(x) > hi) {
				return nil, false
			}
			out[i] = T(x)
		} else {
			if e > hi {
				return nil, false
			}
			out[i] = T(e)
		}
	}
	return out, true
}

// index returns element i of an integer array, sign-extended to 64 bits.
func (v Value) index(i int) uint64 {
	switch a := v.arr.(type) {
	case []uint8:
		return uint64(a[i])
	case []int8:
		return uint64(int64(a[i]))
	case []uint16:
		return uint64(a[i])
	case []int16:
		return uint64(int64(a[i]))
	case []uint32:
		return uint64(a[i])
	case []int32:
		return uint64(int64(a[i]))
	case []uint64:
		return a[i]
	case []int64:
		return uint64(a[i])
	}
	return 0
}

func isSigned(t ValueType) bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

// String renders the value for humans; long arrays are elided.
func (v Value) String() string {
	switch v.typ() {
	case TypeString:
		return fmt.Sprintf("%q", v.str)
	case TypeArray:
		var b strings.Builder
		n := v.Len()
		fmt.Fprintf(&b, "[%s × %d]", v.elem, n)
		if n > 0 {
			b.WriteString(" [")
			for i := range min(n, 6) {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(v.elemString(i))
			}
			if n > 6 {
				b.WriteString(", ...")
			}
			b.WriteString("]")
		}
		return b.String()
	}
	return fmt.Sprint(v.Interface())
}

func (v Value) elemString(i int) string {
	switch a := v.arr.(type) {
	case []string:
		return fmt.Sprintf("%q", a[i])
	case []Value:
		return a[i].String()
	case []float32:
		return fmt.Sprint(a[i])
	case []float64:
		return fmt.Sprint(a[i])
	case []bool:
		return fmt.Sprint(a[i])
	}
	if isSigned(v.elem) {
		return fmt.Sprint(int64(v.index(i)))
	}
	return fmt.Sprint(v.index(i))
}

// ValueOf makes a Value from a Go value: uint8, int8, uint16, int16, uint32,
// int32, float32, bool, string, uint64, int64, float64, a slice of any of
// those, a []Value (an array of arrays, all of one element type), or a Value.
func ValueOf(x any) (Value, error) {
	switch x := x.(type) {
	case Value:
		if !x.IsValid() || (x.typ() == TypeArray && x.arr == nil) {
			return Value{}, fmt.Errorf("gguf: invalid Value")
		}
		return x, nil
	case uint8:
		return Value{kind: kindOf(TypeUint8), num: uint64(x)}, nil
	case int8:
		return Value{kind: kindOf(TypeInt8), num: uint64(int64(x))}, nil
	case uint16:
		return Value{kind: kindOf(TypeUint16), num: uint64(x)}, nil
	case int16:
		return Value{kind: kindOf(TypeInt16), num: uint64(int64(x))}, nil
	case uint32:
		return Value{kind: kindOf(TypeUint32), num: uint64(x)}, nil
	case int32:
		return Value{kind: kindOf(TypeInt32), num: uint64(int64(x))}, nil
	case float32:
		return Value{kind: kindOf(TypeFloat32), num: uint64(math.Float32bits(x))}, nil
	case bool:
		var n uint64
		if x {
			n = 1
		}
		return Value{kind: kindOf(TypeBool), num: n}, nil
	case string:
		return Value{kind: kindOf(TypeString), str: x}, nil
	case uint64:
		return Value{kind: kindOf(TypeUint64), num: x}, nil
	case int64:
		return Value{kind: kindOf(TypeInt64), num: uint64(x)}, nil
	case float64:
		return Value{kind: kindOf(TypeFloat64), num: math.Float64bits(x)}, nil
	case []uint8:
		return array(TypeUint8, x), nil
	case []int8:
		return array(TypeInt8, x), nil
	case []uint16:
		return array(TypeUint16, x), nil
	case []int16:
		return array(TypeInt16, x), nil
	case []uint32:
		return array(TypeUint32, x), nil
	case []int32:
		return array(TypeInt32, x), nil
	case []float32:
		return array(TypeFloat32, x), nil
	case []bool:
		return array(TypeBool, x), nil
	case []string:
		return array(TypeString, x), nil
	case []uint64:
		return array(TypeUint64, x), nil
	case []int64:
		return array(TypeInt64, x), nil
	case []float64:
		return array(TypeFloat64, x), nil
	case []Value:
		for i, e := range x {
			if e.typ() != TypeArray {
				return Value{}, fmt.Errorf("gguf: array of arrays: element %d is a %s", i, e.typ())
			}
		}
		return array(TypeArray, x), nil
	}
	return Value{}, fmt.Errorf("gguf: no GGUF type for Go type %T", x)
}

func array[S any](elem ValueType, s []S) Value {
	if s == nil {
		s = []S{}
	}
	return Value{kind: kindOf(TypeArray), elem: elem, arr: s}
}
