// hidden: every token's final hidden state of an encoder, on llama.cpp's C API,
// for the goldens in llama-embedding.json (README.md). Unpooled and unnormalised
// (LLAMA_POOLING_TYPE_NONE), flash attention off, as JSON:
//   {"text": TEXT, "ids": [...], "hidden": [[...] per token]} with %.9g floats.
// With a third argument, "mean" or "last", it pools the states so instead (and
// applies the file's dense projections, as llama.cpp does after pooling), and
// prints {"ids": [...], "pooled": [...]}, unnormalised. A decoder (Qwen3-Embedding)
// is decoded, an encoder encoded, as llama-embedding does.
// usage: hidden MODEL.gguf TEXT [mean|last]
#include "llama.h"
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    const std::string pool = argc == 4 ? argv[3] : "";
    if (argc != 3 && !(argc == 4 && (pool == "mean" || pool == "last"))) { fprintf(stderr, "usage: %s MODEL TEXT [mean|last]\n", argv[0]); return 1; }
    const bool mean = argc == 4;
    llama_log_set([](ggml_log_level level, const char * text, void *) { if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr); }, nullptr);
    ggml_backend_load_all();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string text = argv[2];
    int n = -llama_tokenize(vocab, text.c_str(), text.size(), nullptr, 0, true, true);
    std::vector<llama_token> toks(n);
    llama_tokenize(vocab, text.c_str(), text.size(), toks.data(), n, true, true);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = pool == "mean" ? LLAMA_POOLING_TYPE_MEAN : pool == "last" ? LLAMA_POOLING_TYPE_LAST : LLAMA_POOLING_TYPE_NONE;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = toks[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = true;
    }
    batch.n_tokens = n;
    const bool enc = llama_model_has_encoder(model) && !llama_model_has_decoder(model);
    if ((enc ? llama_encode(ctx, batch) : llama_decode(ctx, batch)) != 0) { fprintf(stderr, "eval failed\n"); return 1; }
    const int e = llama_model_n_embd(model);
    printf("{\"ids\":[");
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", toks[i]);
    if (mean) {
        const float * p = llama_get_embeddings_seq(ctx, 0);
        printf("],\"pooled\":[");
        for (int j = 0; j < llama_model_n_embd_out(model); j++) printf("%s%.9g", j ? "," : "", p[j]);
        printf("]}\n");
        return 0;
    }
    printf("],\"hidden\":[");
    for (int i = 0; i < n; i++) {
        const float * h = llama_get_embeddings_ith(ctx, i);
        printf("%s[", i ? "," : "");
        for (int j = 0; j < e; j++) printf("%s%.9g", j ? "," : "", h[j]);
        printf("]");
    }
    printf("]}\n");
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
