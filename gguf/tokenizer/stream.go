package tokenizer

import "unicode/utf8"

// Decoder turns ids into text one at a time, as a generation produces
// them. It returns only whole UTF-8 characters, holding back a sequence
// that the next token may complete, and (on vocabularies whose decoding
// cleans spaces before punctuation) the few bytes whose clean-up depends
// on what follows. Invalid bytes come out as U+FFFD once they can no longer
// become valid. The concatenation of everything Next and Flush return
// equals Decode of the same ids with invalid bytes replaced that way.
//
// A Decoder is not safe for concurrent use.
type Decoder struct {
	t       *Tokenizer
	opt     DecodeOptions
	started bool
	pending []byte
}

// NewDecoder returns a streaming decoder. opt.RemoveSpecial does not apply
// (a stream cannot know its last token); the caller stops on IsEOG.
func (t *Tokenizer) NewDecoder(opt DecodeOptions) *Decoder {
	return &Decoder{t: t, opt: opt}
}

// Next adds id and returns the text that became final.
func (d *Decoder) Next(id uint32) (string, error) {
	p, err := d.t.Piece(id, d.opt.RenderSpecial)
	if err != nil {
		return "", err
	}
	if !d.started && !d.opt.Continue {
		p = d.t.stripPrefix(p)
	}
	d.started = true
	d.pending = append(d.pending, p...)
	return d.emit(d.cut()), nil
}

// Flush returns whatever is held back; the Decoder is then empty, and the
// next id continues the text.
func (d *Decoder) Flush() string {
	return d.emit(len(d.pending))
}

// cut is the longest prefix of pending that is final: it does not end
// inside a UTF-8 sequence that may still complete, and, where spaces are
// cleaned, its last byte is one no clean-up rule can join to what follows
// (not a space or apostrophe, nor the r/v of " 're" and " 've").
func (d *Decoder) cut() int {
	b := d.pending
	end, safe := 0, 0
	for end < len(b) && utf8.FullRune(b[end:]) {
		_, n := utf8.DecodeRune(b[end:])
		end += n
		switch b[end-1] {
		case ' ', '\'', 'r', 'v':
		default:
			safe = end
		}
	}
	if d.t.cleanSpaces {
		return safe
	}
	return end
}

func (d *Decoder) emit(n int) string {
	if n == 0 {
		return ""
	}
	b := d.pending[:n]
	if d.t.cleanSpaces {
		b = cleanSpaces(b)
	}
	s := validUTF8(b)
	d.pending = d.pending[:copy(d.pending, d.pending[n:])]
	return s
}
