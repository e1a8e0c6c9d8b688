package node

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/gguf"
	"github.com/meshnode/meshnode/gguf/chat/harmony"
	"github.com/meshnode/meshnode/gguf/tokenizer"
)

// harmonyVocab is the llama-bpe vocabulary with reserved control tokens
// renamed to harmony's markers, as o200k_harmony names its own.
func harmonyVocab(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	gz, err := os.ReadFile("../gguf/tokenizer/testdata/ggml-vocab-llama-bpe.gguf.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tokenizer.VocabFromGGUF(f.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range harmony.Markers {
		v.Tokens[128020+i] = m // <|reserved_special_token_15|> …: control tokens
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestHarmonyDecoder: a harmony vocabulary is recognised, and its replies
// decode with the channel markers written out, so that the API can split
// them: the tokenizer makes them user-defined tokens, as llama.cpp does
// (another vocabulary's control tokens decode to nothing); <|end|> does
// not end the generation (the analysis message ends with it), <|return|>
// does.
func TestHarmonyDecoder(t *testing.T) {
	tok := harmonyVocab(t)
	if !isHarmony(tok) || isHarmony(llamaVocab(t)) {
		t.Fatalf("isHarmony: harmony vocabulary %v, llama's %v", isHarmony(tok), isHarmony(llamaVocab(t)))
	}
	end, _ := tok.Lookup("<|end|>")
	ret, _ := tok.Lookup("<|return|>")
	if tok.IsEOG(end) || !tok.IsEOG(ret) {
		t.Errorf("end-of-generation: <|end|> %v, <|return|> %v; want false, true", tok.IsEOG(end), tok.IsEOG(ret))
	}
	const reply = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Done."
	ids := tok.Encode(reply, tokenizer.EncodeOptions{ParseSpecial: true})
	decode := func(d decoder) string {
		var b strings.Builder
		for _, id := range ids {
			b.WriteString(d.Next(id))
		}
		b.WriteString(d.Flush())
		return b.String()
	}
	text := decode(newTokenDecoder(tok))
	if text != reply {
		t.Fatalf("decoded %q, want %q", text, reply)
	}
	if r, c := harmony.Split(text); r != "Think." || c != "Done." {
		t.Errorf("split %q / %q", r, c)
	}
	llama := llamaVocab(t)
	ids = llama.Encode("<|reserved_special_token_5|>x", tokenizer.EncodeOptions{ParseSpecial: true})
	if plain := decode(newTokenDecoder(llama)); plain != "x" {
		t.Errorf("another vocabulary's control token decodes to %q", plain)
	}
}
