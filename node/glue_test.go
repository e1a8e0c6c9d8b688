package node

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"testing"
)

// FuzzEnergyObject: the usage.energy object a replay or witness body
// carries is read for its seed, draft and envelope without a panic, and
// what each reader returns reads back the same once written again. Seeded
// from the usage.energy object of an answer the node wrote (the README's
// streamed chat request; testdata/fuzz/FuzzEnergyObject), as it is and
// with a seed and a draft as a sampled answer's carries.
func FuzzEnergyObject(f *testing.F) {
	f.Add([]byte(`{"envelope_hex":" 0a0B ","seed":18446744073709551615,"draft":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if s, err := energySeed(b); err == nil && s != nil {
			again, err := energySeed(must(json.Marshal(map[string]uint64{"seed": *s})))
			if err != nil || again == nil || *again != *s {
				t.Fatalf("seed %d reads back as %v, %v", *s, again, err)
			}
		}
		if d, ok, err := energyDraft(b); err == nil && ok {
			again, ok, err := energyDraft(must(json.Marshal(map[string]string{"draft": d})))
			if err != nil || !ok || again != d {
				t.Fatalf("draft %q reads back as %q, %v", d, again, err)
			}
		}
		if env, err := energyEnvelope(b, "energy"); err == nil {
			if len(env) == 0 {
				t.Fatal("an empty envelope read")
			}
			again, err := energyEnvelope(must(json.Marshal(map[string]string{"envelope_hex": hex.EncodeToString(env)})), "energy")
			if err != nil || !bytes.Equal(again, env) {
				t.Fatalf("envelope %x reads back as %x, %v", env, again, err)
			}
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
