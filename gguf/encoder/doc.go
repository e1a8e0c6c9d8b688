// Package encoder runs the BERT family of text encoders (GGUF
// architectures "bert" and "nomic-bert": MiniLM, bge, mxbai-embed,
// snowflake-arctic-embed, nomic-embed-text) as llama.cpp's build_bert
// does: token, token-type and (for bert) position embeddings, a layer
// norm, then post-norm layers of bidirectional attention and a
// feed-forward network, each added back to its input and layer-normed.
// The output is every token's final hidden state, which embeddings pool.
//
// An encoder has no output head and no KV cache: a whole input is one
// pass, every token attending to every other. Its matrix products and
// activations run on a backend.Backend; its layer norms and attention,
// which the decoders' backend kernels do not cover (they attend causally
// over a cache), run on the host in float32, as ggml's CPU kernels do.
package encoder
