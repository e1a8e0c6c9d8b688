package node

import (
	"github.com/meshnode/meshnode/gguf/tokenizer"
	"github.com/meshnode/meshnode/node/api"
)

// llamaBatch is llama-server's default batch (-b 2048), which its
// /infill fits the text around the gap to: the prefix's last three
// quarters of it, the suffix's first quarter (less the prompt and two
// tokens).
const llamaBatch = 2048

// infillPrompt is an /infill request's prompt, composed as llama-server
// composes it (its format_infill, the repo-level pattern of Qwen2.5-Coder's
// report where the vocabulary has its tokens):
//
//	[FIM_REP]myproject\n
//	[FIM_SEP]filename0\n chunk 0 …   (or "\n\n--- snippet ---\n\n" chunk, without FIM_SEP)
//	[FIM_SEP]filename\n
//	BOS? [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
//
// the texts tokenized as they are (no control token read from them). It
// is fitted to limit tokens, leaving room for the answer (its n_predict,
// at most half the context): the prefix keeps its last and the suffix its
// first tokens as llama-server keeps them within a batch of
// min(2048, the room), and the other files' text fills what is left, its
// latest tokens kept. A middle that does not fit even so is too long.
func infillPrompt(tok *tokenizer.Tokenizer, gen *api.Generation, limit int) ([]uint32, error) {
	pre, suf, mid, ok := tok.FIM()
	if !ok {
		return nil, errNoFIM
	}
	in := gen.Infill
	rep, sep := tok.FIMRepo()
	plain := tokenizer.EncodeOptions{}
	var extra []uint32
	if rep != tokenizer.NoToken {
		extra = tok.AppendEncode(append(extra, rep), "myproject\n", plain)
	}
	for _, c := range in.Extra {
		if sep != tokenizer.NoToken {
			extra = tok.AppendEncode(append(extra, sep), c.Filename+"\n", plain)
		} else {
			extra = tok.AppendEncode(extra, "\n\n--- snippet ---\n\n", plain)
		}
		extra = tok.AppendEncode(extra, c.Text, plain)
	}
	if sep != tokenizer.NoToken {
		extra = tok.AppendEncode(append(extra, sep), "filename\n", plain)
	}
	prefix := tok.Encode(in.Prefix, plain)
	suffix := tok.Encode(in.Suffix, plain)
	prompt := tok.Encode(gen.Prompt, plain)

	room := limit - min(gen.MaxTokens, limit/2)
	batch := min(llamaBatch, room)
	nPrefix := min(len(prefix), 3*(batch/4))
	nSuffix := min(len(suffix), max(0, batch/4-(2+len(prompt))))
	var ids []uint32
	if tok.AddsBOS() {
		ids = append(ids, tok.BOS())
	}
	ids = append(append(ids, pre), prefix[len(prefix)-nPrefix:]...)
	ids = append(append(ids, prompt...), suf)
	ids = append(append(ids, suffix[:nSuffix]...), mid)
	if len(ids) > limit {
		return nil, &promptTooLongError{AtLeast: len(ids), Limit: limit}
	}
	// The other files' text goes first, even before BOS, as
	// llama-server puts it.
	nExtra := min(max(0, room-len(ids)), len(extra))
	return append(extra[len(extra)-nExtra:len(extra):len(extra)], ids...), nil
}
