package gguf

import (
	"iter"
	"math"
)

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// Metadata is a file's key-value section, in file order. The typed getters
// return ok=false both when the key is absent and when its value has another
// type (or does not fit the requested one); Lookup tells the two apart.
type Metadata struct {
	kvs   []KV
	index map[string]int
}

// NewMetadata builds a Metadata from kvs; a repeated key is an error.
func NewMetadata(kvs []KV) (*Metadata, error) {
	m := &Metadata{index: make(map[string]int, len(kvs))}
	for _, kv := range kvs {
		if err := m.add(kv); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metadata) add(kv KV) error {
	if kv.Key == "" {
		return errEmptyKey
	}
	if _, dup := m.index[kv.Key]; dup {
		return &dupKeyError{kv.Key}
	}
	m.index[kv.Key] = len(m.kvs)
	m.kvs = append(m.kvs, kv)
	return nil
}

// Len is the number of keys.
func (m *Metadata) Len() int { return len(m.kvs) }

// All yields every key and value in file order.
func (m *Metadata) All() iter.Seq2[string, Value] {
	return func(yield func(string, Value) bool) {
		for _, kv := range m.kvs {
			if !yield(kv.Key, kv.Value) {
				return
			}
		}
	}
}

// KVs returns the pairs in file order (a copy of the list; values alias).
func (m *Metadata) KVs() []KV { return append([]KV(nil), m.kvs...) }

// Lookup returns the value stored under key.
func (m *Metadata) Lookup(key string) (Value, bool) {
	if m == nil {
		return Value{}, false
	}
	i, ok := m.index[key]
	if !ok {
		return Value{}, false
	}
	return m.kvs[i].Value, true
}

// String returns a string value.
func (m *Metadata) String(key string) (string, bool) {
	v, _ := m.Lookup(key)
	return v.AsString()
}

// Bool returns a bool value.
func (m *Metadata) Bool(key string) (bool, bool) {
	v, _ := m.Lookup(key)
	return v.AsBool()
}

// Uint64 returns a non-negative integer value of any width.
func (m *Metadata) Uint64(key string) (uint64, bool) {
	v, _ := m.Lookup(key)
	return v.AsUint64()
}

// Uint32 returns an integer value of any width that fits in a uint32.
func (m *Metadata) Uint32(key string) (uint32, bool) {
	u, ok := m.Uint64(key)
	if !ok || u > math.MaxUint32 {
		return 0, false
	}
	return uint32(u), true
}

// Int64 returns an integer value of any width that fits in an int64.
func (m *Metadata) Int64(key string) (int64, bool) {
	v, _ := m.Lookup(key)
	return v.AsInt64()
}

// Int32 returns an integer value of any width that fits in an int32.
func (m *Metadata) Int32(key string) (int32, bool) {
	i, ok := m.Int64(key)
	if !ok || i < math.MinInt32 || i > math.MaxInt32 {
		return 0, false
	}
	return int32(i), true
}

// Float64 returns a float32 or float64 value.
func (m *Metadata) Float64(key string) (float64, bool) {
	v, _ := m.Lookup(key)
	return v.AsFloat64()
}

// Float32 returns a float32 value, or a float64 value rounded to float32.
func (m *Metadata) Float32(key string) (float32, bool) {
	f, ok := m.Float64(key)
	return float32(f), ok
}

// Strings returns an array of strings. The slice aliases the metadata and
// must not be modified.
func (m *Metadata) Strings(key string) ([]string, bool) {
	v, _ := m.Lookup(key)
	return v.Strings()
}

// Float32s returns an array of float32 (aliased; do not modify), or a
// float64 array converted.
func (m *Metadata) Float32s(key string) ([]float32, bool) {
	v, _ := m.Lookup(key)
	return v.Float32s()
}

// Int32s returns an array of int32 (aliased; do not modify), or another
// integer array converted when every element fits.
func (m *Metadata) Int32s(key string) ([]int32, bool) {
	v, _ := m.Lookup(key)
	return v.Int32s()
}

// Uint32s returns an array of uint32 (aliased; do not modify), or another
// integer array converted when every element fits.
func (m *Metadata) Uint32s(key string) ([]uint32, bool) {
	v, _ := m.Lookup(key)
	return v.Uint32s()
}

// ArrayLen returns the length of an array value.
func (m *Metadata) ArrayLen(key string) (int, bool) {
	v, ok := m.Lookup(key)
	if !ok || v.typ() != TypeArray {
		return 0, false
	}
	return v.Len(), true
}
