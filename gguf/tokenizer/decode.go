package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// DecodeOptions control how ids become text.
type DecodeOptions struct {
	// RenderSpecial writes control tokens as their text ("<|im_end|>");
	// otherwise they decode to nothing. User-defined tokens always render.
	RenderSpecial bool
	// RemoveSpecial drops a leading BOS and a trailing EOS where the
	// vocabulary adds them.
	RemoveSpecial bool
	// Continue says the ids continue earlier text, such as a generation
	// after its prompt, so nothing is stripped. Without it, the first id's
	// piece loses one leading space on vocabularies that add a space prefix
	// when encoding. That is llama_detokenize's rule, in which a leading BOS
	// (rendered, hidden or removed) takes the strip, so the text after a BOS
	// keeps its space.
	Continue bool
}

// Decode returns the text of ids as llama.cpp's llama_detokenize does,
// including the clean-up of spaces before punctuation that byte-level BPE
// vocabularies ask for. The result may hold invalid UTF-8 where ids split a
// character; Decoder is the streaming form that never does.
func (t *Tokenizer) Decode(ids []uint32, opt DecodeOptions) (string, error) {
	if opt.RemoveSpecial && t.addBOS && len(ids) > 0 && ids[0] == t.bos {
		ids = ids[1:]
		opt.Continue = true
	}
	if opt.RemoveSpecial && t.addEOS && len(ids) > 0 && ids[len(ids)-1] == t.eos {
		ids = ids[:len(ids)-1]
	}
	var b []byte
	for i, id := range ids {
		p, err := t.Piece(id, opt.RenderSpecial)
		if err != nil {
			return "", err
		}
		if i == 0 && !opt.Continue {
			p = t.stripPrefix(p)
		}
		b = append(b, p...)
	}
	if t.cleanSpaces {
		b = cleanSpaces(b)
	}
	return string(b), nil
}

// stripPrefix removes the one space a vocabulary with add_space_prefix put
// in front of the first piece.
func (t *Tokenizer) stripPrefix(p string) string {
	if t.addSpacePrefix {
		return strings.TrimPrefix(p, " ")
	}
	return p
}

// Piece is the text of one token: SentencePiece "▁" as a space, GPT-2
// bytes decoded, <0xNN> tokens as their byte (so a piece may be part of a
// UTF-8 character). Control and unknown tokens are empty unless special.
func (t *Tokenizer) Piece(id uint32, special bool) (string, error) {
	if id >= uint32(len(t.pieces)) {
		return "", fmt.Errorf("%w: %d of %d", ErrInvalidToken, id, len(t.pieces))
	}
	if !special && t.attrs[id]&attrSpecial != 0 {
		return "", nil
	}
	return t.pieces[id], nil
}

// piece computes the rendered text of id (llama_token_to_piece with
// special = true).
func (t *Tokenizer) piece(id uint32) string {
	a, text := t.attrs[id], t.tokens[id]
	switch {
	case a&(attrSpecial|attrUserDefined) != 0:
		return text
	case a&attrNormal != 0:
		if t.escapeSpaces {
			return strings.ReplaceAll(text, "▁", " ")
		}
		return decodeByteLevel(text)
	case a&attrByte != 0:
		return string([]byte{hexByte(text)})
	}
	return "" // unused and undefined tokens
}

// hexByte reads the NN of "<0xNN>" like strtol: hex digits until the first
// other character.
func hexByte(text string) byte {
	var v byte
	for i := 3; i < min(5, len(text)); i++ {
		c := text[i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return v
		}
		v = v<<4 | d
	}
	return v
}

// decodeByteLevel maps a GPT-2 byte-level token text back to bytes; a code
// point outside the alphabet is spelled out as llama.cpp does.
func decodeByteLevel(text string) string {
	_, dec := byteAlphabet()
	var b []byte
	for i := 0; i < len(text); {
		r, n := decodeRune(text, i)
		if c, ok := dec[r]; ok {
			b = append(b, c)
		} else {
			b = append(b, "[UNK_BYTE_0x"...)
			for _, c := range appendRune(nil, r) {
				b = fmt.Appendf(b, "%02x", c)
			}
			b = append(b, text...)
			b = append(b, ']')
		}
		i += n
	}
	return string(b)
}

// cleanSpaces is Hugging Face's clean_up_tokenization_spaces as llama.cpp
// implements it, in place: " ?" " !" " ." " ," lose the space, a lone
// apostrophe between spaces loses both, and " 's" " 'm" " 're" " 've" lose
// the space. Each pass reads the previous one's output.
func cleanSpaces(text []byte) []byte {
	if len(text) == 0 {
		return text
	}
	total := 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if text[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') {
			total--
		}
		text[total] = x
		total++
	}
	text = text[:total]

	total = 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if x == '\'' && i+1 < len(text) && text[i-1] == ' ' && text[i+1] == ' ' {
			total--
			i++
			text[i] = 0 // the next space is dropped; llama.cpp also blanks it in place
		}
		text[total] = x
		total++
	}
	text = text[:total]

	total = 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if text[i-1] == ' ' && x == '\'' && i+1 < len(text) {
			switch x1 := text[i+1]; {
			case x1 == 's' || x1 == 'm':
				total--
			case i+2 < len(text) && (x1 == 'r' || x1 == 'v') && text[i+2] == 'e':
				total--
			}
		}
		text[total] = x
		total++
	}
	return text[:total]
}

// validUTF8 replaces each byte that is not part of a valid UTF-8 sequence
// with U+FFFD, the way ranging over a Go string reads it.
func validUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		sb.WriteRune(r)
		b = b[n:]
	}
	return sb.String()
}
