// rerank: a reranker's scores on llama.cpp's C API, for the goldens in
// llama-rerank.json and node/engine/ggufengine/testdata/llama-rerank-qwen3.json
// (README.md): each document joined to the query as llama-server's
// format_prompt_rerank joins them (the file's rerank template with {query}
// and {document} replaced, tokenized without specials added and with
// special texts parsed; else [BOS] query [EOS] [SEP] doc [EOS], each as the
// vocabulary adds them), scored by rank pooling (the first value of the
// sequence's output), flash attention off.
// Prints {"query", "results": [{"document", "ids", "score"}]}.
// usage: rerank MODEL QUERY DOC...
#include "llama.h"
#include <cstdio>
#include <string>
#include <vector>

static std::vector<llama_token> tokenize(const llama_vocab * vocab, const std::string & s, bool special = false) {
    int n = -llama_tokenize(vocab, s.c_str(), s.size(), nullptr, 0, false, special);
    std::vector<llama_token> t(n);
    llama_tokenize(vocab, s.c_str(), s.size(), t.data(), n, false, special);
    return t;
}

static void replace_all(std::string & s, const std::string & from, const std::string & to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

static void json_string(const std::string & s) {
    putchar('"');
    for (char c : s) { if (c == '"' || c == '\\') putchar('\\'); putchar(c); }
    putchar('"');
}

int main(int argc, char ** argv) {
    if (argc < 4) { fprintf(stderr, "usage: %s MODEL QUERY DOC...\n", argv[0]); return 1; }
    llama_log_set([](ggml_log_level level, const char * text, void *) { if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr); }, nullptr);
    ggml_backend_load_all();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    cp.embeddings = true;
    cp.pooling_type = LLAMA_POOLING_TYPE_RANK;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }
    std::string query = argv[2];
    printf("{\"query\":");
    json_string(query);
    printf(",\"results\":[");
    for (int d = 3; d < argc; d++) {
        std::vector<llama_token> toks;
        const char * tmpl = llama_model_chat_template(model, "rerank");
        llama_token eos = llama_vocab_eos(vocab);
        if (tmpl) {
            std::string prompt = tmpl;
            replace_all(prompt, "{query}", query);
            replace_all(prompt, "{document}", argv[d]);
            toks = tokenize(vocab, prompt, true);
        } else {
        if (eos == LLAMA_TOKEN_NULL) eos = llama_vocab_sep(vocab);
        if (llama_vocab_get_add_bos(vocab)) toks.push_back(llama_vocab_bos(vocab));
        for (auto t : tokenize(vocab, query)) toks.push_back(t);
        if (llama_vocab_get_add_eos(vocab)) toks.push_back(eos);
        if (llama_vocab_get_add_sep(vocab)) toks.push_back(llama_vocab_sep(vocab));
        for (auto t : tokenize(vocab, argv[d])) toks.push_back(t);
        if (llama_vocab_get_add_eos(vocab)) toks.push_back(eos);
        }
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_batch batch = llama_batch_init(toks.size(), 0, 1);
        for (size_t i = 0; i < toks.size(); i++) {
            batch.token[i] = toks[i]; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = true;
        }
        batch.n_tokens = toks.size();
        // An encoder (BERT) is encoded, a decoder (Qwen3) decoded, as llama-embedding does.
        const bool enc = llama_model_has_encoder(model) && !llama_model_has_decoder(model);
        if ((enc ? llama_encode(ctx, batch) : llama_decode(ctx, batch)) != 0) { fprintf(stderr, "eval failed\n"); return 1; }
        if (!llama_get_embeddings_seq(ctx, 0)) { fprintf(stderr, "no pooled output\n"); return 1; }
        const float * s = llama_get_embeddings_seq(ctx, 0);
        printf("%s{\"document\":", d > 3 ? "," : "");
        json_string(argv[d]);
        printf(",\"ids\":[");
        for (size_t i = 0; i < toks.size(); i++) printf("%s%d", i ? "," : "", toks[i]);
        printf("],\"score\":%.9g}", s[0]);
        llama_batch_free(batch);
    }
    printf("]}\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
