// Package encoder runs the BERT family of text encoders (GGUF
// architectures "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2",
// "jina-bert-v3", "modern-bert" and "gemma-embedding": MiniLM, bge,
// mxbai-embed, snowflake-arctic-embed, nomic-embed-text v1 to v2-moe,
// jina-embeddings-v2 and v3, jina-reranker-v1, ModernBERT and its
// embedding models, EmbeddingGemma) as llama.cpp builds them: token,
// token-type and (for bert) position embeddings, a layer norm, then
// post-norm layers of bidirectional attention (nomic-bert and
// jina-bert-v3 rotate Q and K; jina-bert-v2 biases the scores by ALiBi)
// and a feed-forward network (nomic-bert-moe's a mixture of experts in
// every second layer), each added back to its input and layer-normed;
// modern-bert's layers norm
// before attention and the feed-forward instead, and attend locally, in a
// sliding window, on two layers of three; gemma-embedding's are Gemma 3's
// (RMS norms around attention and the feed-forward, grouped queries)
// attending both ways, its pooled vector projected (Model.Project).
// The output is every token's final hidden state, which embeddings pool.
//
// An encoder has no output head and no KV cache: a whole input is one
// pass, every token attending to every other. Its matrix products,
// activations and attention run on a backend.Backend, the attention on
// one that attends without a cache (backend.FullAttender: the CPU's); its
// layer norms, which the decoders' kernels do not have (they RMS-norm),
// run on the host in float32, as ggml_norm computes them.
package encoder
