package backend

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf/quant"
)

type shapeWeight struct{ rows, cols int }

func (w shapeWeight) Type() quant.Type { return quant.F32 }
func (w shapeWeight) Rows() int        { return w.rows }
func (w shapeWeight) Cols() int        { return w.cols }

// TestCheckMoEMatMul: the operands' shapes MoEMatMul takes (x of n or
// n·k rows, dst of n·k, biases one per expert) pass; each break is named.
func TestCheckMoEMatMul(t *testing.T) {
	ex := []Weight{shapeWeight{6, 4}, shapeWeight{6, 4}}
	sel := Tensor{Rows: 3, Cols: 2}
	for _, x := range []Tensor{{Rows: 3, Cols: 4}, {Rows: 6, Cols: 4}} {
		if err := CheckMoEMatMul(Tensor{Rows: 6, Cols: 6}, ex, ex, x, sel); err != nil {
			t.Errorf("x of %d rows: %v", x.Rows, err)
		}
	}
	for _, c := range []struct {
		name    string
		dst, x  Tensor
		experts []Weight
		biases  []Weight
		want    string
	}{
		{"no experts", Tensor{Rows: 6, Cols: 6}, Tensor{Rows: 3, Cols: 4}, nil, nil, "chosen"},
		{"dst rows", Tensor{Rows: 5, Cols: 6}, Tensor{Rows: 3, Cols: 4}, ex, nil, "chosen"},
		{"x rows", Tensor{Rows: 6, Cols: 6}, Tensor{Rows: 4, Cols: 4}, ex, nil, "chosen"},
		{"biases", Tensor{Rows: 6, Cols: 6}, Tensor{Rows: 3, Cols: 4}, ex, ex[:1], "chosen"},
		{"x cols", Tensor{Rows: 6, Cols: 6}, Tensor{Rows: 3, Cols: 5}, ex, nil, "ᵀ"},
		{"dst cols", Tensor{Rows: 6, Cols: 7}, Tensor{Rows: 3, Cols: 4}, ex, nil, "ᵀ"},
	} {
		if err := CheckMoEMatMul(c.dst, c.experts, c.biases, c.x, sel); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
