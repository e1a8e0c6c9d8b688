package ggufengine

import (
	"fmt"
	"sync"

	"github.com/meshnode/meshnode/gguf/grammar"
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/engine"
)

// Constrainer is a model's vocabulary as grammar-constrained decoding
// needs it: every token's bytes and the trie over them
// (grammar.Vocab), built on the first constrained serve and kept for
// the model's life.
type Constrainer struct {
	tok  Pieces
	size int

	once   sync.Once
	pieces [][]byte
	vocab  *grammar.Vocab
	// control holds the text of the tokens that have none in pieces
	// (control tokens rendered): the mask never allows one, but a lazy
	// grammar's trigger may be one ([TOOL_CALLS]).
	control map[uint32][]byte
}

// Pieces is what a Constrainer reads of a vocabulary (a
// *tokenizer.Tokenizer): each token's bytes, and the ends of generation.
type Pieces interface {
	IsEOG(id uint32) bool
	Piece(id uint32, special bool) (string, error)
}

var _ Pieces = (*tokenizer.Tokenizer)(nil)

// NewConstrainer returns the Constrainer of a vocabulary whose model's
// logits have size entries.
func NewConstrainer(tok Pieces, size int) *Constrainer {
	return &Constrainer{tok: tok, size: size}
}

func (c *Constrainer) build() {
	c.once.Do(func() {
		n := c.size
		c.pieces = make([][]byte, n)
		var eog []uint32
		for id := range n {
			// Control tokens have no bytes, so no grammar allows them;
			// the ends of generation are allowed where a grammar ends.
			// Ids past the tokenizer's have none either.
			p, err := c.tok.Piece(uint32(id), false)
			if err != nil {
				continue
			}
			c.pieces[id] = []byte(p)
			if p == "" {
				if r, err := c.tok.Piece(uint32(id), true); err == nil && r != "" {
					if c.control == nil {
						c.control = map[uint32][]byte{}
					}
					c.control[uint32(id)] = []byte(r)
				}
			}
			if c.tok.IsEOG(uint32(id)) {
				eog = append(eog, uint32(id))
			}
		}
		c.vocab = grammar.NewVocab(c.size, n, c.piece, eog)
	})
}

func (c *Constrainer) piece(id uint32) []byte {
	if int(id) < len(c.pieces) {
		return c.pieces[id]
	}
	return nil
}

// text is token id's text as the output shows it, a control token's too.
func (c *Constrainer) text(id uint32) []byte {
	if t, ok := c.control[id]; ok {
		return t
	}
	return c.piece(id)
}

// Vocab is the model's trie (built on first use).
func (c *Constrainer) Vocab() *grammar.Vocab {
	c.build()
	return c.vocab
}

// Start begins a generation under g: its constraint, and the mask of its
// first token. A grammar no token of the vocabulary can begin is refused
// (engine.ErrRefused), before any work.
func (c *Constrainer) Start(g *grammar.Grammar) (*grammar.Constraint, []uint64, error) {
	c.build()
	con, err := grammar.NewConstraint(g, c.vocab, c.text)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", engine.ErrRefused, err)
	}
	mask, err := con.Mask()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the model cannot write this grammar's output: %v", engine.ErrRefused, err)
	}
	return con, mask, nil
}
