# meshnode build, test and release targets. Everything here runs on a fresh
# machine after .ci/run's installs; nothing needs cgo.

GO          ?= go
BIN         ?= bin
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -buildid= -X github.com/meshnode/meshnode/node.Version=$(VERSION)
FUZZTIME    ?= 10s
BENCHTIME   ?= 1s
TESTTIMEOUT ?= 20m

# Pinned tool versions: `go run pkg@version` fetches exactly these.
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_WANT   := libprotoc 3.21.12

CROSS_TARGETS := linux/amd64 linux/arm64 darwin/arm64

.PHONY: all build test race lint cross fuzz proto proto-check bench bench-node bench-stages bench-placement clean security

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/meshnode ./cmd/meshcli

test:
	CGO_ENABLED=0 $(GO) test -timeout $(TESTTIMEOUT) ./...

# The attacks docs/security.md lists, each a test that reproduces one on
# loopback and must see it refused (TestAttack*). make test runs them too.
security:
	GO=$(GO) scripts/security.sh

# The concurrent parts under the race detector (needs cgo for the detector
# only; the shipped binaries never do).
race:
	CGO_ENABLED=1 $(GO) test -race -timeout $(TESTTIMEOUT) ./node/...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=0 $(GO) run $(STATICCHECK) ./...

cross:
	@set -e; for t in $(CROSS_TARGETS); do \
		echo "build $$t"; \
		CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) build ./...; \
		CGO_ENABLED=0 GOOS=$${t%/*} GOARCH=$${t#*/} $(GO) vet ./...; \
	done

fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# Regenerates the committed protobuf code with the pinned protoc and
# protoc-gen-go.
proto:
	@v=$$(protoc --version); [ "$$v" = "$(PROTOC_WANT)" ] || { echo "protoc is '$$v', want '$(PROTOC_WANT)' (Debian bookworm's protobuf-compiler)"; exit 1; }
	GOBIN=$(CURDIR)/$(BIN) $(GO) install $(PROTOC_GEN_GO)
	protoc --plugin=protoc-gen-go=$(BIN)/protoc-gen-go --proto_path=node/wire/proto \
		--go_out=. --go_opt=module=github.com/meshnode/meshnode node/wire/proto/meshllm/node/v1/node.proto

# Fails when the committed generated code differs from what `make proto` writes.
proto-check: proto
	git diff --exit-code -- node/wire/nodev1

bench:
	CGO_ENABLED=0 $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -benchmem ./...

# The daemon as a user runs it: binary sizes, idle RSS, API overhead and
# requests/s with the reference engine.
bench-node:
	scripts/node-bench.sh

# Decode tok/s of the built-in model whole and in 2 and 3 stages: on
# loopback in one process, and across network namespaces (root; skipped
# otherwise) with 0, 1 and 5 ms RTT, against the cost model
# (docs/mesh.md, "Split-model costs"). Every configuration runs
# STAGE_ROUNDS times, alternating the order.
STAGE_BENCHTIME ?= 200x
STAGE_ROUNDS    ?= 3
bench-stages:
	MESHNODE_STAGE_BENCH_ROUNDS=$(STAGE_ROUNDS) CGO_ENABLED=0 $(GO) test -run '^$$' \
		-bench '^(BenchmarkPipelineDecode|BenchmarkStagesNetns)$$' -benchtime $(STAGE_BENCHTIME) ./node/stage/

# Mesh-wide placement across network namespaces (root; skipped
# otherwise): aggregate tok/s of a 3-node mesh with the model on 1 and 2
# hosts, and joules per token with energy-aware against RTT-only
# placement (docs/mesh.md, "Placement").
PLACEMENT_BENCHTIME ?= 3x
bench-placement:
	CGO_ENABLED=0 $(GO) test -run '^$$' -bench '^BenchmarkPlacementNetns$$' -benchtime $(PLACEMENT_BENCHTIME) ./node/

clean:
	rm -rf $(BIN)

# Regenerates gguf/quant/testdata/ggml-goldens.gguf from the llama.cpp
# reference build (LLAMACPP_REF, default ~/.cache/llamacpp-ref).
.PHONY: goldens-gguf
goldens-gguf:
	gguf/quant/testdata/goldens.sh $(LLAMACPP_REF)

.PHONY: parity parity-heldout bench-engine

# Rebuilds the engine's parity goldens (gguf/model/testdata/parity) from
# llama.cpp: the build tools/llamacpp-ref/build.sh makes, in $LLAMACPP
# (default /root/.cache/llamacpp-ref). Then run the tests as usual. The
# committed goldens come from a build without AVX-512 (docs/engine.md,
# "Parity with llama.cpp"): a native build on an AVX-512 FP16 CPU rounds
# F16 models' logits and misses the tolerances.
parity:
	CGO_ENABLED=0 $(GO) test ./gguf/model/ -run '^TestParity$$' -count=1 -update -v

# The parity gate on fixtures the goldens never saw: every architecture and
# weight type with seeds and shapes drawn from PARITY_SEED (a new one each
# run unless given; the log names it), against the llama.cpp build in
# $LLAMACPP run now. A step over the tolerance passes only within 2x the
# engine's own last-bit sensitivity there, measured by perturbed runs
# (docs/engine.md, "Parity with llama.cpp"). Nothing is written.
parity-heldout:
	PARITY_HELDOUT=1 CGO_ENABLED=0 $(GO) test ./gguf/model/ -run '^TestParityHeldOut$$' -count=1 -timeout 60m -v

# llama.cpp's llama-bench and this engine on the same files (the parity
# fixtures and Llama-3.2-1B-shaped random Q4_0, Q8_0 and Q4_K_M models),
# same threads, one run: prefill and decode tok/s, ratios, peak RSS. Knobs:
# BENCH_THREADS, BENCH_PP, BENCH_TG, BENCH_REPS, BENCH_1B=0,
# BENCH_FIXTURES=0, BENCH_QWEN35=1 (adds a Qwen3.5-0.8B-shaped random
# Q8_0 model), BENCH_LFM2=1 (LFM2-350M-shaped Q8_0 and Q4_0; see
# gguf/model/bench_test.go), BENCH_ONEROW=band, rows or ahead (the CPU
# backend's one-row kernels fixed rather than timed: cpu.Options.OneRow).
bench-engine:
	MESHNODE_BENCH_ENGINE=1 CGO_ENABLED=0 $(GO) test ./gguf/model/ -run '^$$' -bench '^BenchmarkEngineVsLlamaCpp$$' -benchtime 1x -timeout 60m

# Encoders (embedding models) against llama.cpp's llama-bench -embd 1 on
# the same MiniLM-L6-, bge-base- and nomic-embed-shaped files, inputs of
# 32, 128 and 512 tokens: tok/s and ratios (docs/engine.md, Text encoders).
.PHONY: bench-encoder
bench-encoder:
	MESHNODE_BENCH_ENGINE=1 CGO_ENABLED=0 $(GO) test ./gguf/encoder/ -run '^$$' -bench '^BenchmarkEncoderVsLlamaCpp$$' -benchtime 1x -v -timeout 30m

# Decode tok/s of qwen3moe models with 8, 32 and 128 experts (8 used per
# token) beside a dense qwen3 of the same active size: the time follows the
# active parameters, not the total (gguf/model/bench_moe_test.go). Knobs:
# BENCH_THREADS, BENCH_LAYERS.
.PHONY: bench-moe
bench-moe:
	MESHNODE_BENCH_MOE=1 CGO_ENABLED=0 $(GO) test ./gguf/model/ -run '^$$' -bench '^BenchmarkMoEDecode$$' -benchtime 300x -count 2 -timeout 30m

# llama.cpp's llama-batched-bench and this engine's batched forward step
# (model.Batch) on the same Llama-3.2-1B-shaped Q4_0 file (128k vocabulary),
# same threads, one run: S_PP and S_TG at B = 1, 2, 4, 8 and the ratios.
# Knobs: BENCH_THREADS, BENCH_PP, BENCH_TG, BENCH_REPS, BENCH_B, BENCH_MODEL
# (see gguf/model/bench_batch_test.go).
.PHONY: bench-batch
bench-batch:
	MESHNODE_BENCH_BATCH=1 CGO_ENABLED=0 $(GO) test ./gguf/model/ -run '^$$' -bench '^BenchmarkBatchedVsLlamaCpp$$' -benchtime 1x -timeout 60m

# Through the node: aggregate tok/s and p50/p99 time to first token at 1, 4,
# 8 and 32 concurrent streamed requests on the bench-batch model, this tree
# against BEFORE_REV's build when set (scripts/node-batch-bench.sh).
.PHONY: bench-node-batch
bench-node-batch:
	GO=$(GO) scripts/node-batch-bench.sh

# .deb/.rpm for linux/amd64 and linux/arm64 (package), plus the darwin/arm64
# tarball and SHA256SUMS in a clean dist/ (release); see docs/install.md.
NFPM := github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
.PHONY: package release
package release:
	GO='$(GO)' VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' NFPM='$(NFPM)' packaging/build.sh $@

# CUDA kernels: cuda/kernels/*.cu compiled to PTX (sm_72, sm_80) by Debian's
# clang-14, committed gzipped and embedded in the binary. ptx-check fails when the
# committed PTX is not what the sources compile to (it skips, saying so,
# where clang-14 is not installed).
.PHONY: ptx ptx-check bench-cuda
ptx:
	cuda/kernels/ptx.sh

ptx-check:
	cuda/kernels/ptx.sh --check

# On a machine with an NVIDIA GPU: prefill and decode tok/s for the fixtures
# and 1B-shaped models, and decode's memory bandwidth against the device's
# copy bandwidth (cuda/bench_test.go). scripts/gpu-check.sh runs it with the
# GPU tests.
bench-cuda:
	MESHNODE_BENCH_CUDA=1 CGO_ENABLED=0 $(GO) test ./cuda/ -run '^$$' -bench '^BenchmarkCUDA$$' -benchtime 1x -timeout 30m -v

# On an Apple Silicon Mac: prefill and decode tok/s for the fixtures and
# 1B-shaped models, and decode's bandwidth against the chip's
# (metal/bench_test.go). scripts/metal-check.sh runs it with the GPU tests
# and llama.cpp's llama-bench; MESHNODE_METAL_DEVICE=stand-in tries it on
# the CPU stand-in.
.PHONY: bench-metal
bench-metal:
	MESHNODE_BENCH_METAL=1 CGO_ENABLED=0 $(GO) test ./metal/ -run '^$$' -bench '^BenchmarkMetal$$' -benchtime 1x -timeout 30m -v

# The arm64 (NEON) kernels on an amd64 machine under qemu-aarch64-static
# (Debian's qemu-user-static), with SDOT (-cpu max) and without it
# (cortex-a72: the Go kernels for the quantised types, and no SDOT kernel
# may be chosen): gguf/quant's and gguf/deltanet's kernels against their Go
# twins, gguf/detmath's digests, gguf/model's pinned logits digests, the delta nets' host path
# against the CPU kernels, the gpt-oss, Qwen3.5 and LFM2 fixtures against
# llama.cpp's logits (and LFM2's gated convolution kernel against its
# float64 reference), gguf/sample's pinned digests of its exponentials
# and seeded draws, and the encoders' hidden states and scores against
# llama.cpp's with their attention and GELU kernels. qemu's timings are no
# speed figures.
.PHONY: qemu-arm64
qemu-arm64:
	@set -e; d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/quant.test ./gguf/quant; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/model.test ./gguf/model; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/sample.test ./gguf/sample; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/deltanet.test ./gguf/deltanet; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/detmath.test ./gguf/detmath; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/encoder.test ./gguf/encoder; \
	CGO_ENABLED=0 GOARCH=arm64 $(GO) test -c -o $$d/cpu.test ./gguf/cpu; \
	for c in max cortex-a72; do \
		echo "encoder and its cpu kernels on $$c"; (cd gguf/encoder && qemu-aarch64-static -cpu $$c $$d/encoder.test -test.run 'Matches|Scores') && (cd gguf/cpu && qemu-aarch64-static -cpu $$c $$d/cpu.test -test.run 'AttendFull|GELUGLU|GatedConv'); \
		echo "quant on $$c"; (cd gguf/quant && qemu-aarch64-static -cpu $$c $$d/quant.test -test.run 'SIMD|MatMul|MatVecRows|Pack'); \
		echo "sample on $$c"; (cd gguf/sample && qemu-aarch64-static -cpu $$c $$d/sample.test); \
		echo "deltanet and detmath on $$c"; (cd gguf/deltanet && qemu-aarch64-static -cpu $$c $$d/deltanet.test) && (cd gguf/detmath && qemu-aarch64-static -cpu $$c $$d/detmath.test); \
		echo "model on $$c"; (cd gguf/model && qemu-aarch64-static -cpu $$c $$d/model.test -test.run '^(TestLogitsArePinned|TestHybridKernelsMatchHost|TestParity)$$/^(gpt-oss-|qwen35|lfm2)'); \
	done

# The amd64 kernels on x86-64 CPUs other than this machine's, under
# qemu-x86_64-static (Debian's qemu-user-static; its TCG has no AVX-512, so
# an AVX-512 instruction on these paths would stop the test): Haswell (AVX2,
# FMA and F16C: the AVX2 tiles and row kernels, the 8-lane exponentials and
# SiLU, no int8 head shadow; the CPUID bits TCG lacks switched off, so that
# qemu does not warn) and Nehalem (no AVX: the Go kernels). gguf/quant's
# kernels against their Go twins, gguf/cpu's, gguf/deltanet's and
# gguf/detmath's tests, gguf/model's pinned logits digest and gguf/sample's tests (its four-lane exponentials on
# Haswell): the same bits as the AVX-512 kernels give. qemu's timings
# are no speed figures.
QEMU_AMD64_CPUS = Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm Nehalem
.PHONY: qemu-amd64
qemu-amd64:
	@set -e; d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	for p in quant cpu model sample deltanet detmath; do CGO_ENABLED=0 GOARCH=amd64 $(GO) test -c -o $$d/$$p.test ./gguf/$$p; done; \
	for c in $(QEMU_AMD64_CPUS); do \
		echo "quant on $${c%%,*}"; (cd gguf/quant && qemu-x86_64-static -cpu $$c $$d/quant.test -test.run 'SIMD|MatMul|MatVecRows|WideRows|Pack'); \
		echo "deltanet and detmath on $${c%%,*}"; (cd gguf/deltanet && qemu-x86_64-static -cpu $$c $$d/deltanet.test) && (cd gguf/detmath && qemu-x86_64-static -cpu $$c $$d/detmath.test); \
		echo "sample on $${c%%,*}"; (cd gguf/sample && qemu-x86_64-static -cpu $$c $$d/sample.test); \
		echo "cpu on $${c%%,*}"; (cd gguf/cpu && qemu-x86_64-static -cpu $$c $$d/cpu.test); \
		echo "model on $${c%%,*}"; (cd gguf/model && qemu-x86_64-static -cpu $$c $$d/model.test -test.run '^TestLogitsArePinned$$'); \
	done

# Speculative decoding: greedy decode tok/s with and without speculation,
# acceptance, the draft's measured cost c and the speedup against the ideal
# E/(K·c+1), for the built-in F16 with its Q8_0, its Q4_0 (made once in
# the bench cache) and meshnode-fortunes-draft as drafts, prompt lookup on a
# repeating prompt with the built-in F16 and Q8_0, and the 1B-shaped Q8_0
# with prompt lookup and with its Q4_0 as draft when present; windows priced
# as the engine prices a greedy serve's (spec.Measure). Knobs:
# BENCH_BACKEND (cpu, cuda or metal), BENCH_THREADS, BENCH_TG, BENCH_REPS,
# BENCH_CASE, BENCH_WINDOWS, BENCH_CACHE, MESHNODE_MODELS (see
# gguf/spec/bench_spec_test.go).
.PHONY: bench-spec
bench-spec:
	MESHNODE_BENCH_SPEC=1 MESHNODE_MODELS=$${MESHNODE_MODELS:-$(abspath ../shared/models)} CGO_ENABLED=0 $(GO) test ./gguf/spec/ -run '^$$' -bench '^BenchmarkSpeculative$$' -benchtime 1x -timeout 60m -v

# Sampled serves (temperature 0.7) of the built-in F16 with each of its
# proposers: plain, speculating whatever the measured prices say (windows
# priced by the files, as before), and as the engine serves them
# (speculating only where spec.Prices.SampledPays says, windows priced at
# the sampled prices measured); those prices and tok/s
# (gguf/spec/bench_sampled_test.go). Knobs: BENCH_TG,
# BENCH_SEEDS, BENCH_THREADS, BENCH_BACKEND, MESHNODE_MODELS.
.PHONY: bench-spec-sampled
bench-spec-sampled:
	MESHNODE_BENCH_SPEC=1 MESHNODE_MODELS=$${MESHNODE_MODELS:-$(abspath ../shared/models)} CGO_ENABLED=0 $(GO) test ./gguf/spec/ -run '^$$' -bench '^BenchmarkSampledSpeculation$$' -benchtime 1x -timeout 30m

# Concurrent speculating serves with their drafts stepped together on the
# draft model's scheduler against each on its own session, beside plain
# decoding (node/engine/ggufengine/bench_spec_test.go; docs/engine.md,
# "Speculative decoding").
.PHONY: bench-spec-batch
bench-spec-batch:
	MESHNODE_BENCH_SPEC=1 MESHNODE_MODELS=$${MESHNODE_MODELS:-$(abspath ../shared/models)} CGO_ENABLED=0 $(GO) test ./node/engine/ggufengine/ -run '^$$' -bench '^BenchmarkSpeculativeBatch$$' -benchtime 1x -timeout 30m

# Greedy serves held to a grammar (a JSON schema, GBNF), speculating
# against plainly: the built-in Q8_0 with prompt lookup, and the 1B-shaped
# Q8_0 (from make bench-spec's cache) with the built-in Q8_0 as draft and
# with lookup (node/engine/ggufengine/bench_spec_grammar_test.go;
# docs/engine.md, "Speculation under a grammar"). Knobs: BENCH_REPS,
# BENCH_CACHE.
.PHONY: bench-spec-grammar
bench-spec-grammar:
	MESHNODE_BENCH_SPEC=1 CGO_ENABLED=0 $(GO) test ./node/engine/ggufengine/ -run '^$$' -bench '^BenchmarkConstrainedSpeculation$$' -benchtime 1x -timeout 30m

# Predicted outputs (OpenAI's prediction): greedy serves drafting from a
# predicted answer, whole and edited, against plain decoding, on the
# built-in Q8_0 and the 1B-shaped Q8_0 (from make bench-spec's cache)
# (node/engine/ggufengine/bench_prediction_test.go; docs/engine.md,
# "Predicted outputs"). Knobs: BENCH_REPS, BENCH_CACHE.
.PHONY: bench-prediction
bench-prediction:
	MESHNODE_BENCH_SPEC=1 CGO_ENABLED=0 $(GO) test ./node/engine/ggufengine/ -run '^$$' -bench '^BenchmarkPrediction$$' -benchtime 1x -timeout 30m

# Structured outputs: the grammar mask's cost per token against decode time
# per token on the 1B-shaped Q8_0 (BENCH_CACHE, default the user cache's
# meshnode-bench; the built-in model, with the reason, when it is absent),
# and the ratio; the goal is under 10% (node/engine/ggufengine/
# bench_grammar_test.go, docs/api.md "Structured outputs").
.PHONY: bench-grammar
bench-grammar:
	MESHNODE_BENCH_GRAMMAR=1 CGO_ENABLED=0 $(GO) test ./node/engine/ggufengine/ -run '^$$' -bench '^BenchmarkGrammarMask$$' -benchtime 1x -timeout 30m -v

# Decode tok/s of the built-in model split in 2 and 3 stages over in-process
# pipes (and with 1 ms of one-way latency per frame), plain, with prompt
# lookup and with the trained draft (MESHNODE_MODELS), each priced by the
# files and by the pipeline's measured prices; BENCH_SAMPLED=1 samples
# (docs/engine.md, "Speculative decoding"). Then a pipeline measured over
# links of no latency and served over 1 ms ones, on the prices of its
# placement and measured again on drift (BenchmarkSplitDrift). Then the
# model with no draft given a predicted output, its answer whole and
# edited, against plain decoding (BenchmarkSplitPrediction, BENCH_REPS).
.PHONY: bench-spec-split
bench-spec-split:
	CGO_ENABLED=0 $(GO) test ./node/engine/splitengine/ -run '^$$' -bench '^BenchmarkSplit(Speculation|Drift)$$' -benchtime 20x
	CGO_ENABLED=0 $(GO) test ./node/engine/splitengine/ -run '^$$' -bench '^BenchmarkSplitPrediction$$' -benchtime 1x

# Decode tok/s of 4 serves at once on the built-in model in 2 stages over
# 1 ms links, plain and with prompt lookup, their steps shared against
# each stepping alone (docs/mesh.md, "Concurrent serves").
.PHONY: bench-split
bench-split:
	CGO_ENABLED=0 $(GO) test ./node/engine/splitengine/ -run '^$$' -bench '^BenchmarkSplitConcurrent$$' -benchtime 10x
