package backend

import (
	"math"
	"slices"
	"testing"
)

// TestRoute: the router's softmax, top-k and renormalisation on small
// cases worked by hand (build_moe_ffn with a softmax gate and norm_w).
func TestRoute(t *testing.T) {
	probs := make([]float32, 4)
	sel, w := make([]int, 2), make([]float32, 2)

	// exp(0, ln 2, ln 3, ln 4) / 10: the top two are experts 3 and 2,
	// best first, with 0.4 and 0.3, renormalised to 4/7 and 3/7.
	logits := []float32{0, float32(math.Log(2)), float32(math.Log(3)), float32(math.Log(4))}
	Route(logits, nil, probs, sel, w, GateSoftmax)
	if !slices.Equal(sel, []int{3, 2}) || math.Abs(float64(w[0])-0.4) > 1e-6 || math.Abs(float64(w[1])-0.3) > 1e-6 {
		t.Errorf("unnormalised: experts %v weights %v, want [3 2] [0.4 0.3]", sel, w)
	}
	Route(logits, nil, probs, sel, w, GateSoftmaxNorm)
	if !slices.Equal(sel, []int{3, 2}) || math.Abs(float64(w[0])-4.0/7) > 1e-6 || math.Abs(float64(w[1])-3.0/7) > 1e-6 {
		t.Errorf("normalised: experts %v weights %v, want [3 2] [4/7 3/7]", sel, w)
	}

	// Equal scores: the lower index first, so the choice is a function
	// of the row alone.
	Route([]float32{1, 5, 5, 5}, nil, probs, sel, w, GateSoftmaxNorm)
	if !slices.Equal(sel, []int{1, 2}) || w[0] != w[1] || w[0] != 0.5 {
		t.Errorf("ties: experts %v weights %v, want [1 2] [0.5 0.5]", sel, w)
	}

	// Scores far apart: the other experts' probabilities underflow to 0
	// and the one chosen weighs exactly 1.
	sel1, w1 := make([]int, 1), make([]float32, 1)
	Route([]float32{0, -200, -300, -400}, nil, probs, sel1, w1, GateSoftmaxNorm)
	if sel1[0] != 0 || w1[0] != 1 {
		t.Errorf("one dominant expert: %v %v", sel1, w1)
	}
}

// TestRouteChosen: gpt-oss's gating picks by logit and weighs by a softmax
// over the chosen alone.
func TestRouteChosen(t *testing.T) {
	sel, w := make([]int, 2), make([]float32, 2)
	logits := []float32{float32(math.Log(3)), 0, 7, 7 + float32(math.Log(3))}
	Route(logits, nil, make([]float32, 4), sel, w, GateSoftmaxChosen)
	if !slices.Equal(sel, []int{3, 2}) || math.Abs(float64(w[0])-0.75) > 1e-6 || math.Abs(float64(w[1])-0.25) > 1e-6 {
		t.Errorf("experts %v weights %v, want [3 2] [0.75 0.25]", sel, w)
	}
	Route([]float32{2, 2, 2, 1}, nil, make([]float32, 4), sel, w, GateSoftmaxChosen)
	if !slices.Equal(sel, []int{0, 1}) || w[0] != 0.5 || w[1] != 0.5 {
		t.Errorf("ties: experts %v weights %v, want [0 1] [0.5 0.5]", sel, w)
	}
}

// TestRouteSigmoid: lfm2moe's gating chooses by sigmoid plus the
// selection bias and weighs by the unbiased sigmoids, renormalised.
func TestRouteSigmoid(t *testing.T) {
	sel, w := make([]int, 2), make([]float32, 2)
	// Sigmoids 0.5, 0.5, 0.75 (ln 3), 0.25 (−ln 3); the bias lifts expert
	// 3 over expert 2 and expert 0 over expert 1 (a tie unbiased).
	logits := []float32{0, 0, float32(math.Log(3)), -float32(math.Log(3))}
	bias := []float32{0.01, 0, 0, 0.6}
	Route(logits, bias, make([]float32, 4), sel, w, GateSigmoidNorm)
	if !slices.Equal(sel, []int{3, 2}) || math.Abs(float64(w[0])-0.25) > 1e-6 || math.Abs(float64(w[1])-0.75) > 1e-6 {
		t.Errorf("experts %v weights %v, want [3 2] [0.25 0.75]", sel, w)
	}
	Route(logits, []float32{0.01, 0, 0, 0}, make([]float32, 4), sel, w, GateSigmoidNorm)
	if !slices.Equal(sel, []int{2, 0}) || math.Abs(float64(w[0])-0.6) > 1e-6 || math.Abs(float64(w[1])-0.4) > 1e-6 {
		t.Errorf("experts %v weights %v, want [2 0] [0.6 0.4]", sel, w)
	}
	if s := Sigmoid(-200); s != 0 || Sigmoid(200) != 1 || Sigmoid(0) != 0.5 {
		t.Errorf("sigmoid at the ends: %v %v %v", s, Sigmoid(200), Sigmoid(0))
	}
}
