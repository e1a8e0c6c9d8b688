package tokenizer

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf"
)

// GGUF metadata keys this package reads.
const (
	keyModel          = "tokenizer.ggml.model"
	keyPre            = "tokenizer.ggml.pre"
	keyTokens         = "tokenizer.ggml.tokens"
	keyScores         = "tokenizer.ggml.scores"
	keyTypes          = "tokenizer.ggml.token_type"
	keyMerges         = "tokenizer.ggml.merges"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSEP         = "tokenizer.ggml.add_sep_token"
	keyLowercase      = "tokenizer.ggml.normalizer.lowercase"
	keyStripAccents   = "tokenizer.ggml.normalizer.strip_accents"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyRemoveSpaces   = "tokenizer.ggml.remove_extra_whitespaces"
	keyCharsMap       = "tokenizer.ggml.precompiled_charsmap"
	keyName           = "general.name"
)

// FromGGUF builds the tokenizer a GGUF file's metadata describes.
func FromGGUF(md *gguf.Metadata) (*Tokenizer, error) {
	v, err := VocabFromGGUF(md)
	if err != nil {
		return nil, err
	}
	return New(v)
}

// VocabFromGGUF reads the tokenizer.* metadata, filling what the file
// leaves out with llama.cpp's defaults for the vocabulary kind: SentencePiece
// BOS 1, EOS 2, UNK 0, BOS added and a space prefix; GPT-2 BPE BOS and EOS
// 11, BOS added only for the llama3 pre-tokenizer family; WPM (BERT) BOS
// ([CLS]) 101, UNK 100, SEP 102, PAD 0, BOS and SEP added, lower-cased
// and accents stripped; Unigram ("t5") EOS 1, UNK 2, PAD 0, EOS added and
// no BOS or space prefix. Special ids the file gives out of range are
// ignored, as llama.cpp does.
func VocabFromGGUF(md *gguf.Metadata) (*Vocab, error) {
	v := &Vocab{BOS: NoToken, EOS: NoToken, EOT: NoToken, EOM: NoToken, UNK: NoToken, PAD: NoToken, SEP: NoToken,
		FIMPre: NoToken, FIMSuf: NoToken, FIMMid: NoToken, FIMRep: NoToken, FIMSep: NoToken}
	var ok bool
	if v.Model, ok = md.String(keyModel); !ok {
		return nil, fmt.Errorf("%w: %s missing or not a string", ErrInvalidVocab, keyModel)
	}
	v.Pre, _ = md.String(keyPre)
	v.Name, _ = md.String(keyName)
	if v.Tokens, ok = md.Strings(keyTokens); !ok {
		return nil, fmt.Errorf("%w: %s missing or not a string array", ErrInvalidVocab, keyTokens)
	}
	n := len(v.Tokens)
	if val, present := md.Lookup(keyScores); present {
		switch val.ElemType() {
		case gguf.TypeFloat32:
			v.Scores, _ = val.Float32s()
		case gguf.TypeInt32:
			is, _ := val.Int32s()
			v.Scores = make([]float32, len(is))
			for i, s := range is {
				v.Scores[i] = float32(s)
			}
		}
		if v.Scores == nil || val.Type() != gguf.TypeArray {
			return nil, fmt.Errorf("%w: %s is %s, want an array of float32 or int32", ErrInvalidVocab, keyScores, val.Type())
		}
	}
	if val, present := md.Lookup(keyTypes); present {
		ts, ok := val.Int32s()
		if !ok || val.Type() != gguf.TypeArray {
			return nil, fmt.Errorf("%w: %s is %s, want an array of int32", ErrInvalidVocab, keyTypes, val.Type())
		}
		v.Types = make([]TokenType, len(ts))
		for i, t := range ts {
			v.Types[i] = TokenType(t)
		}
	}

	switch v.Model {
	case ModelSPM:
		v.BOS, v.EOS, v.UNK = 1, 2, 0
		v.AddBOS, v.AddSpacePrefix = true, true
	case ModelBPE, ModelGemma4:
		if v.Merges, ok = md.Strings(keyMerges); !ok {
			return nil, fmt.Errorf("%w: %s missing or not a string array", ErrInvalidVocab, keyMerges)
		}
		if v.Model == ModelBPE {
			v.BOS, v.EOS = 11, 11
		}
		if p, ok := preTokenizers[v.Pre]; ok {
			v.AddBOS = p.addBOS
		}
		switch v.Pre {
		case "jina-v1-en", "jina-v2-code", "roberta-bpe":
			v.AddSEP = true
		}
	case ModelWPM:
		v.BOS, v.UNK, v.SEP, v.PAD = 101, 100, 102, 0
		v.AddBOS, v.AddSEP = true, true
	case ModelUGM:
		v.EOS, v.UNK, v.PAD = 1, 2, 0
		v.AddEOS = true
		if val, present := md.Lookup(keyCharsMap); present {
			cm, err := charsMapBytes(val)
			if err != nil {
				return nil, err
			}
			v.CharsMap = cm
		}
	default:
		return nil, fmt.Errorf("%w: model %q", ErrUnsupported, v.Model)
	}
	for _, id := range []*uint32{&v.BOS, &v.EOS, &v.UNK, &v.SEP, &v.PAD} {
		if *id != NoToken && *id >= uint32(n) {
			*id = NoToken
		}
	}
	for key, id := range map[string]*uint32{
		"tokenizer.ggml.bos_token_id":     &v.BOS,
		"tokenizer.ggml.eos_token_id":     &v.EOS,
		"tokenizer.ggml.eot_token_id":     &v.EOT,
		"tokenizer.ggml.eom_token_id":     &v.EOM,
		"tokenizer.ggml.unknown_token_id": &v.UNK,
		"tokenizer.ggml.padding_token_id": &v.PAD,
		// sic: llama.cpp's key
		"tokenizer.ggml.seperator_token_id": &v.SEP,
		"tokenizer.ggml.fim_pre_token_id":   &v.FIMPre,
		"tokenizer.ggml.fim_suf_token_id":   &v.FIMSuf,
		"tokenizer.ggml.fim_mid_token_id":   &v.FIMMid,
		"tokenizer.ggml.fim_rep_token_id":   &v.FIMRep,
		"tokenizer.ggml.fim_sep_token_id":   &v.FIMSep,
	} {
		if x, ok := md.Uint32(key); ok && x < uint32(n) {
			*id = x
		}
	}
	// The FIM tokens' names before llama.cpp's FIM rework (CodeLlama's
	// files), where the file has no newer one.
	for key, id := range map[string]*uint32{
		"tokenizer.ggml.prefix_token_id": &v.FIMPre,
		"tokenizer.ggml.suffix_token_id": &v.FIMSuf,
		"tokenizer.ggml.middle_token_id": &v.FIMMid,
	} {
		if x, ok := md.Uint32(key); ok && x < uint32(n) && *id == NoToken {
			*id = x
		}
	}
	if b, ok := md.Bool(keyAddSpacePrefix); ok {
		v.AddSpacePrefix = b
	}
	if b, ok := md.Bool(keyRemoveSpaces); ok {
		v.RemoveExtraSpaces = b
	}
	if b, ok := md.Bool(keyAddBOS); ok {
		v.AddBOS = b
	}
	if b, ok := md.Bool(keyAddEOS); ok {
		v.AddEOS = b
	}
	if b, ok := md.Bool(keyAddSEP); ok {
		v.AddSEP = b
	}
	// Accents go with the case unless the file says otherwise (llama.cpp's
	// BertNormalizer options).
	if b, ok := md.Bool(keyLowercase); ok {
		v.KeepCase, v.KeepAccents = !b, !b
	}
	if b, ok := md.Bool(keyStripAccents); ok {
		v.KeepAccents = !b
	}
	if v.Model == ModelGemma4 {
		v.AddBOS = true // llama.cpp PR 21500
	}
	return v, nil
}

// charsMapBytes reads tokenizer.ggml.precompiled_charsmap, an array of
// uint8 or int8 (as llama.cpp takes either) of at least the 4-byte size
// header. The bytes alias the metadata; New copies what it keeps.
func charsMapBytes(val gguf.Value) ([]byte, error) {
	var b []byte
	ok := false
	if val.Type() == gguf.TypeArray {
		switch a := val.Interface().(type) {
		case []uint8:
			b, ok = a, true
		case []int8:
			b, ok = make([]byte, len(a)), true
			for i, x := range a {
				b[i] = byte(x)
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s is %s, want an array of uint8 or int8", ErrInvalidVocab, keyCharsMap, val.Type())
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %s of %d bytes has no size header", ErrInvalidVocab, keyCharsMap, len(b))
	}
	return b, nil
}
