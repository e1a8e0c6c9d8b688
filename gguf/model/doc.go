// Package model runs llama-family language models from GGUF files: it
// reads an architecture's hyperparameters (llama, qwen2, phi3, gemma3),
// binds the file's tensors to a backend (package backend's kernel set), and
// evaluates tokens through the forward pass — batched for a prompt, one
// token at a time for decoding — over a per-session KV cache.
//
// The graph follows llama.cpp's (src/models/*.cpp) operation for operation,
// including where it rounds: keys and values in an f16 cache, activations
// quantised to the weight's dot-product format, RMSNorm sums in float64. Its
// logits are checked against llama.cpp's on fixture models of every
// architecture and weight type (see the package tests and `make parity`).
//
// A Model is immutable once loaded and shared by any number of Sessions;
// a Session is one sequence (a conversation), whose cached prefix is reused
// when the next prompt starts with it.
//
// A model too big for one machine runs as stages (LoadStage): each loads
// a contiguous range of blocks, keeps KV for those blocks only, and steps
// a Batch from token ids (the first stage) or the previous stage's hidden
// rows (StepHidden) to hidden rows (Hidden) or logits (the last stage).
// With f32 hidden rows between them the stages compute the whole model's
// logits bit for bit.
package model
