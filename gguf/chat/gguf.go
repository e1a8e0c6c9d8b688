package chat

import (
	"fmt"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// KeyTemplate is the GGUF metadata key of the default chat template.
const KeyTemplate = "tokenizer.chat_template"

// FromGGUF compiles the chat template of a GGUF file, with bos_token and
// eos_token set to the texts of the file's BOS and EOS tokens and stripped
// from the result where the tokenizer adds them itself (llama.cpp's
// behaviour). A file without a template gets the plain transcript.
func FromGGUF(md *gguf.Metadata) (*Template, error) {
	src, _ := md.String(KeyTemplate)
	v, err := tokenizer.VocabFromGGUF(md)
	if err != nil {
		return nil, fmt.Errorf("chat: reading the vocabulary for bos_token/eos_token: %w", err)
	}
	var opt Options
	if v.BOS != tokenizer.NoToken {
		opt.BOS = v.Tokens[v.BOS]
	}
	if v.EOS != tokenizer.NoToken {
		opt.EOS = v.Tokens[v.EOS]
	}
	opt.StripBOS, opt.StripEOS = v.AddBOS, v.AddEOS
	return Compile(src, opt)
}
