package grammar

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestIntRange: a range's grammar takes exactly its integers, written as
// JSON writes them: every integer of small ranges and the numbers around
// them, and the edges of large and random ones.
func TestIntRange(t *testing.T) {
	ranges := [][2]int64{{0, 0}, {0, 9}, {1, 100}, {7, 7}, {-5, 5}, {-100, -7}, {10, 99}, {19, 2001}, {-1, 0},
		{123, 456}, {0, maxJSONInteger}, {-maxJSONInteger, maxJSONInteger}, {999, 1000}, {1000, 1999}}
	rng := rand.New(rand.NewPCG(8, 8))
	for range 40 {
		a, b := rng.Int64N(2_000_000)-1_000_000, rng.Int64N(2_000_000)-1_000_000
		ranges = append(ranges, [2]int64{min(a, b), max(a, b)})
	}
	for _, r := range ranges {
		g := build(t, intRange(r[0], r[1]))
		check := func(v int64) {
			t.Helper()
			in := v >= r[0] && v <= r[1]
			if got := accepts(t, g, strconv.FormatInt(v, 10)); got != in {
				t.Fatalf("[%d, %d]: %d taken %v", r[0], r[1], v, got)
			}
		}
		if r[1]-r[0] <= 3000 {
			for v := r[0] - 50; v <= r[1]+50; v++ {
				check(v)
			}
		}
		for _, v := range []int64{r[0], r[1], r[0] - 1, r[1] + 1, (r[0] + r[1]) / 2} {
			if v >= -maxJSONInteger && v <= maxJSONInteger {
				check(v)
			}
		}
		for range 200 {
			check(r[0] + rng.Int64N(r[1]-r[0]+1))
		}
		for _, s := range []string{"-0", "01", "+1", "", "-"} {
			if accepts(t, g, s) {
				t.Fatalf("[%d, %d] takes %q", r[0], r[1], s)
			}
		}
	}
}

// TestTupleBounds: a tuple's grammar takes exactly the arrays its
// prefixItems, items and bounds allow, over every array of up to five of
// the values 0 … 3 and 9, for every prefix length, rest and bounds.
func TestTupleBounds(t *testing.T) {
	var arrays [][]int
	var grow func(a []int)
	grow = func(a []int) {
		arrays = append(arrays, a)
		if len(a) == 5 {
			return
		}
		for _, v := range []int{0, 1, 2, 3, 9} {
			grow(append(append([]int(nil), a...), v))
		}
	}
	grow(nil)
	for k := 1; k <= 3; k++ {
		for _, rest := range []string{"", `,"items":false`, `,"items":{"const":9}`} {
			for lo := 0; lo <= 4; lo++ {
				for hi := -1; hi <= 5; hi++ {
					if hi >= 0 && lo > hi {
						continue
					}
					schema := `{"type":"array","prefixItems":[`
					for i := range k {
						if i > 0 {
							schema += ","
						}
						schema += `{"const":` + strconv.Itoa(i) + `}`
					}
					schema += `]` + rest + `,"minItems":` + strconv.Itoa(lo)
					if hi >= 0 {
						schema += `,"maxItems":` + strconv.Itoa(hi)
					}
					schema += `}`
					g, err := FromSchema([]byte(schema))
					if err != nil {
						if rest == `,"items":false` && lo > k {
							continue // no array: refused
						}
						t.Fatalf("%s: %v", schema, err)
					}
					for _, a := range arrays {
						want := len(a) >= lo && (hi < 0 || len(a) <= hi)
						for i, v := range a {
							switch {
							case i < k:
								want = want && v == i
							case rest == `,"items":false`:
								want = false
							case rest != "":
								want = want && v == 9
							}
						}
						doc := "["
						for i, v := range a {
							if i > 0 {
								doc += ","
							}
							doc += strconv.Itoa(v)
						}
						doc += "]"
						if got := accepts(t, g, doc); got != want {
							t.Fatalf("%s on %s: grammar %v, want %v", schema, doc, got, want)
						}
					}
				}
			}
		}
	}
}
