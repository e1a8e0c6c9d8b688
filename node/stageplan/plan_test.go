package stageplan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// model8 is 8 blocks of 100 bytes, 10 of KV each, embeddings 50, head 30:
// 960 bytes whole.
func model8() Model {
	return Model{Layers: []int64{100, 100, 100, 100, 100, 100, 100, 100}, Embed: 50, Head: 30, KVPerLayer: 10}
}

func ranges(p Plan) [][3]any {
	var out [][3]any
	for _, s := range p.Stages {
		out = append(out, [3]any{s.Host, s.Lo, s.Hi})
	}
	return out
}

func TestMake(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		self  Host
		peers []Host
		opt   Options
		want  [][3]any
	}{
		{"fits alone: no split", Host{ID: "s", Free: 960}, []Host{{ID: "a", Free: 1 << 20}}, Options{},
			[][3]any{{"s", 0, 8}}},
		{"fits alone with headroom counted", Host{ID: "s", Free: 1000}, []Host{{ID: "a", Free: 1 << 20}}, Options{Headroom: 40},
			[][3]any{{"s", 0, 8}}},
		{"headroom tips it over", Host{ID: "s", Free: 1000}, []Host{{ID: "a", Free: 1 << 20}}, Options{Headroom: 41},
			[][3]any{{"s", 0, 8 - 1}, {"a", 7, 8}}},
		{"self takes what fits, one peer the rest", Host{ID: "s", Free: 600}, []Host{{ID: "a", Free: 1000}}, Options{},
			// 50 + 5·110 = 600; a: 3·110 + 30 = 360
			[][3]any{{"s", 0, 5}, {"a", 5, 8}}},
		{"fewest stages beats lower RTT", Host{ID: "s", Free: 380},
			[]Host{{ID: "near1", Free: 400, RTT: ms}, {ID: "near2", Free: 400, RTT: ms}, {ID: "far", Free: 10000, RTT: 20 * ms}}, Options{},
			[][3]any{{"s", 0, 3}, {"far", 3, 8}}},
		{"lower RTT among equals", Host{ID: "s", Free: 600},
			[]Host{{ID: "a", Free: 1000, RTT: 5 * ms}, {ID: "b", Free: 1000, RTT: 2 * ms}}, Options{},
			[][3]any{{"s", 0, 5}, {"b", 5, 8}}},
		{"higher bandwidth at equal RTT", Host{ID: "s", Free: 600},
			[]Host{{ID: "a", Free: 1000, RTT: ms, Bandwidth: 10}, {ID: "b", Free: 1000, RTT: ms, Bandwidth: 20}}, Options{},
			[][3]any{{"s", 0, 5}, {"b", 5, 8}}},
		{"ties by id", Host{ID: "s", Free: 600},
			[]Host{{ID: "b", Free: 1000}, {ID: "a", Free: 1000}}, Options{},
			[][3]any{{"s", 0, 5}, {"a", 5, 8}}},
		{"a peer above the RTT limit is never a stage", Host{ID: "s", Free: 600},
			[]Host{{ID: "a", Free: 1 << 20, RTT: 50 * ms}, {ID: "b", Free: 250, RTT: 2 * ms}, {ID: "c", Free: 250, RTT: 3 * ms}}, Options{MaxRTT: 10 * ms},
			// b: 2·110 = 220; c: 110 + 30 = 140
			[][3]any{{"s", 0, 5}, {"b", 5, 7}, {"c", 7, 8}}},
		{"force splits a model that fits", Host{ID: "s", Free: 1 << 20}, []Host{{ID: "a", Free: 1 << 20}}, Options{Force: true},
			[][3]any{{"s", 0, 7}, {"a", 7, 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(model8(), tc.self, tc.peers, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := ranges(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan %v, want %v", got, tc.want)
			}
			if p.Split() != (len(tc.want) > 1) {
				t.Errorf("Split() = %v", p.Split())
			}
		})
	}
}

func TestPins(t *testing.T) {
	big := int64(1 << 20)
	peers := []Host{{ID: "a", Free: big}, {ID: "b", Free: big}, {ID: "c", Free: big}}
	p, err := Make(model8(), Host{ID: "s", Free: big}, peers, Options{Pins: []Pin{{Host: "b", Lo: 6, Hi: 8}, {Host: "a", Lo: 2, Hi: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]any{{"s", 0, 2}, {"a", 2, 4}, {"c", 4, 6}, {"b", 6, 8}}
	if got := ranges(p); !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	// Self pinned: the rest is fitted around it.
	p, err = Make(model8(), Host{ID: "s", Free: big}, peers, Options{Pins: []Pin{{Host: "s", Lo: 0, Hi: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ranges(p), [][3]any{{"s", 0, 3}, {"a", 3, 8}}; !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}

	for _, tc := range []struct {
		name string
		pins []Pin
		opt  Options
	}{
		{"overlap", []Pin{{"a", 2, 5}, {"b", 4, 6}}, Options{}},
		{"out of range", []Pin{{"a", 6, 9}}, Options{}},
		{"empty", []Pin{{"a", 3, 3}}, Options{}},
		{"layer 0 on a peer", []Pin{{"a", 0, 3}}, Options{}},
		{"self not at 0", []Pin{{"s", 2, 3}}, Options{}},
		{"unknown host", []Pin{{"z", 2, 3}}, Options{}},
		{"twice", []Pin{{"a", 2, 3}, {"a", 5, 6}}, Options{}},
		{"too small", []Pin{{"small", 1, 8}}, Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Pins = tc.pins
			_, err := Make(model8(), Host{ID: "s", Free: big}, append(peers, Host{ID: "small", Free: 300}), tc.opt)
			if !errors.Is(err, ErrPin) {
				t.Errorf("err %v, want ErrPin", err)
			}
		})
	}
	// The gap 4-6 needs a free host: with none left the pins cannot be
	// completed.
	_, err = Make(model8(), Host{ID: "s", Free: big}, peers[:2], Options{Pins: []Pin{{Host: "b", Lo: 6, Hi: 8}, {Host: "a", Lo: 2, Hi: 4}}})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Errorf("pins leaving a gap no host can fill: %v", err)
	}
	far := []Host{{ID: "far", Free: big, RTT: time.Second}}
	_, err = Make(model8(), Host{ID: "s", Free: big}, far, Options{MaxRTT: time.Millisecond, Pins: []Pin{{"far", 4, 8}}})
	if !errors.Is(err, ErrPin) {
		t.Errorf("a pin on a host above the RTT limit: %v", err)
	}
}

func TestNoFit(t *testing.T) {
	_, err := Make(model8(), Host{ID: "s", Free: 500}, []Host{{ID: "a", Free: 400}}, Options{})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("err %v, want a *NoFitError", err)
	}
	if nf.Need != 960 || nf.Free != 900 || nf.Missing() != 60 || nf.Hosts != 2 {
		t.Errorf("%+v, missing %d", nf, nf.Missing())
	}
	t.Log(err)

	// Enough together, but not in contiguous pieces within the stage
	// limit.
	_, err = Make(model8(), Host{ID: "s", Free: 165}, []Host{{ID: "a", Free: 120}, {ID: "b", Free: 120}, {ID: "c", Free: 700}},
		Options{MaxStages: 2})
	if !errors.As(err, &nf) || nf.Missing() != 0 {
		t.Fatalf("err %v", err)
	}
	t.Log(err)

	if _, err := Make(Model{}, Host{ID: "s"}, nil, Options{}); !errors.Is(err, ErrModel) {
		t.Errorf("no layers: %v", err)
	}
}

// TestDeterministic: the same inputs give the same plan, whatever the
// order of the peers.
func TestDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var peers []Host
	for i := range 12 {
		peers = append(peers, Host{ID: string(rune('a' + i)), Free: 150 + r.Int64N(400),
			RTT: time.Duration(r.IntN(3)) * time.Millisecond, Bandwidth: float64(r.IntN(2))})
	}
	self := Host{ID: "s", Free: 300}
	first, err := Make(model8(), self, peers, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		r.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		p, err := Make(model8(), self, peers, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, first) {
			t.Fatalf("plan %v, then %v", first, p)
		}
	}
	if first.Stages[0].Host != "s" || first.Stages[0].Lo != 0 || first.Stages[len(first.Stages)-1].Hi != 8 {
		t.Errorf("plan %v", first)
	}
	for i := 1; i < len(first.Stages); i++ {
		if first.Stages[i].Lo != first.Stages[i-1].Hi {
			t.Errorf("plan %v is not contiguous", first)
		}
	}
}

// errShared is a fake model's reason for refusing a stage.
var errShared = errors.New("layer 6 reads layer 3's KV")

// sharedKV is model8 whose blocks 4-7 read the KV of block 3 (as a gemma4
// model's shared-KV blocks do): a stage may start at block 3 or before,
// not after.
func sharedKV() Model {
	m := model8()
	m.Check = func(lo, hi int) error {
		if lo > 3 {
			return fmt.Errorf("layers %d-%d: %w", lo, hi, errShared)
		}
		return nil
	}
	return m
}

// TestCheckMovesCuts: a cut the model forbids moves back to the nearest
// allowed one, and each stage of the plan is one Check allows.
func TestCheckMovesCuts(t *testing.T) {
	big := int64(1 << 20)
	for _, tc := range []struct {
		name  string
		self  Host
		peers []Host
		opt   Options
		want  [][3]any
	}{
		// Without Check self takes 0-5 (50 + 5·110 = 600).
		{"self's cut moves back", Host{ID: "s", Free: 600}, []Host{{ID: "a", Free: 1000}}, Options{},
			[][3]any{{"s", 0, 3}, {"a", 3, 8}}},
		{"forced split", Host{ID: "s", Free: big}, []Host{{ID: "a", Free: big}}, Options{Force: true},
			[][3]any{{"s", 0, 3}, {"a", 3, 8}}},
		// a could hold 1-5, but the rest must start by block 3: a takes
		// 1-3 and b the rest.
		{"a middle cut moves back", Host{ID: "s", Free: 160}, []Host{{ID: "a", Free: 440, RTT: time.Millisecond}, {ID: "b", Free: 580, RTT: 2 * time.Millisecond}}, Options{},
			[][3]any{{"s", 0, 1}, {"a", 1, 3}, {"b", 3, 8}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Make(sharedKV(), tc.self, tc.peers, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := ranges(p); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan %v, want %v", got, tc.want)
			}
		})
	}
	// No host can hold 3-8 whole: the split the memory allows is refused
	// by the model, so nothing fits.
	_, err := Make(sharedKV(), Host{ID: "s", Free: 600}, []Host{{ID: "a", Free: 400}, {ID: "b", Free: 400}}, Options{})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Errorf("no allowed placement fits: %v, want a *NoFitError", err)
	}
}

// TestUnsplittable: a model that loads only whole is planned whole when it
// fits, and a split of it is refused with ErrUnsplittable and the model's
// reason.
func TestUnsplittable(t *testing.T) {
	errWhole := errors.New("its recurrent state cannot be split")
	m := model8()
	m.Check = func(lo, hi int) error {
		if lo > 0 || hi < 8 {
			return fmt.Errorf("layers %d-%d: %w", lo, hi, errWhole)
		}
		return nil
	}
	big := int64(1 << 20)
	p, err := Make(m, Host{ID: "s", Free: big}, nil, Options{})
	if err != nil || p.Split() {
		t.Fatalf("fits alone: %v %v", p, err)
	}
	for name, opt := range map[string]Options{"forced": {Force: true}, "too big for self": {}} {
		free := big
		if name == "too big for self" {
			free = 500
		}
		_, err := Make(m, Host{ID: "s", Free: free}, []Host{{ID: "a", Free: big}}, opt)
		if !errors.Is(err, ErrUnsplittable) || !errors.Is(err, errWhole) {
			t.Errorf("%s: %v, want ErrUnsplittable wrapping the model's reason", name, err)
		}
	}
	one := Model{Layers: []int64{100}}
	if _, err := Make(one, Host{ID: "s", Free: 10}, []Host{{ID: "a", Free: big}}, Options{}); !errors.Is(err, ErrUnsplittable) {
		t.Errorf("one block: %v", err)
	}
}

// TestPinsChecked: a pin that is not a stage the model allows, or that
// leaves blocks around it no allowed stage can hold, is refused up front
// as a bad pin with the model's reason.
func TestPinsChecked(t *testing.T) {
	big := int64(1 << 20)
	peers := []Host{{ID: "a", Free: big}, {ID: "b", Free: big}}
	for _, tc := range []struct {
		name string
		pins []Pin
	}{
		{"the pin itself", []Pin{{"a", 5, 8}}},
		{"the stage after the pin", []Pin{{"a", 2, 4}}},
		{"self's pin leaves the rest", []Pin{{"s", 0, 5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Make(sharedKV(), Host{ID: "s", Free: big}, peers, Options{Pins: tc.pins})
			if !errors.Is(err, ErrPin) || !errors.Is(err, errShared) {
				t.Errorf("err %v, want ErrPin wrapping the model's reason", err)
			}
		})
	}
	// Allowed pins plan as before, the free range fitted around them.
	p, err := Make(sharedKV(), Host{ID: "s", Free: big}, peers, Options{Pins: []Pin{{"a", 1, 3}}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ranges(p), [][3]any{{"s", 0, 1}, {"a", 1, 3}, {"b", 3, 8}}; !reflect.DeepEqual(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
}
