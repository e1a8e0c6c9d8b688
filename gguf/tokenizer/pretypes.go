package tokenizer

// preTokenizer is what a tokenizer.ggml.pre value selects for a BPE vocab:
// how text is cut into words before merging, and the flags llama.cpp ties
// to that name.
type preTokenizer struct {
	splits       []splitter
	rawUTF8      bool // merge over raw UTF-8 with <0xNN> byte fallback, not GPT-2 bytes
	escapeSpaces bool // spaces become U+2581 before merging (SPM-style BPE)
	ignoreMerges bool // a word that is itself a token is taken whole
	addBOS       bool // default for tokenizer.ggml.add_bos_token
	keepSpaces   bool // no clean-up of " ," and " 's" when decoding
	noBOS        bool // the vocab has no BOS token (GLM-4)
	// wholeNewlines takes a run of newlines whole when it is a token
	// (Gemma 4; llama.cpp PR 21343).
	wholeNewlines bool
}

var (
	splitGPT2     = scanner(scanGPT2)
	splitLlama3   = scanner(llamaScanner{digits: 3, letter: clsLetter}.scan)
	splitQwen2    = scanner(llamaScanner{digits: 1, letter: clsLetter}.scan)
	splitQwen35   = scanner(llamaScanner{digits: 1, letter: clsLetter | clsMark}.scan)
	splitNewlines = scanner(scanNewlines)

	// [^(\s|.,!?…。，、।۔،)]: std::wregex reads the parentheses and bar
	// literally inside the brackets.
	poroWord = func(r rune, f uint16) bool {
		return f&clsWhitespace == 0 && !oneOf("(|.,!?…。，、।۔،)")(r, f)
	}
	isPoroWord = class(poroWord)
	poroSplit  = prefixed(oneOf(" "), isPoroWord).split

	// deepseek-llm's explicit letter ranges.
	deepseekLetters = notWS(oneOf("A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃"))
	deepseekPunct   = notWS(oneOf("!-/:-~！-／：-～‘-‟　-。"))
)

// Pre-tokenizer families, named after the llama.cpp pre-type they mirror.
var (
	preDefault = preTokenizer{splits: []splitter{
		run(anyOf(isPunct, oneOf("$+<=>^~|"))).split, // [\p{P}\$\+<=>\^~\|]+
		splitGPT2,
		run(isNumber).split,       // \p{N}+
		exactly(isDigit, 3).split, // [0-9][0-9][0-9]
	}}
	preGPT2   = preTokenizer{splits: []splitter{splitGPT2}}
	preLlama3 = preTokenizer{splits: []splitter{splitLlama3}}
	preQwen2  = preTokenizer{splits: []splitter{splitQwen2}, keepSpaces: true}
	preFalcon = preTokenizer{splits: []splitter{
		run(anyOf(isPunct, oneOf("$+<=>^~|`"))).split,
		splitGPT2,
		exactly(isDigit, 3).split,
	}}
	preStarcoder  = preTokenizer{splits: []splitter{one(isNumber).split, splitGPT2}}
	prePoro       = preTokenizer{splits: []splitter{poroSplit}, keepSpaces: true}
	preCaseWords  = preTokenizer{splits: []splitter{matcher(caseWords{contractions: true, digits: 3}.match).split}, keepSpaces: true}
	preDeepseekV3 = preTokenizer{keepSpaces: true, splits: []splitter{
		upTo(isNumber, 3).split,              // \p{N}{1,3}
		run(notWS(oneOf("一-龥぀-ゟ゠-ヿ"))).split, // CJK ideographs, hiragana, katakana
		matcher(deepseekV3).split,
	}}
	preGemma4 = preTokenizer{splits: []splitter{splitNewlines}, rawUTF8: true, escapeSpaces: true, wholeNewlines: true}
)

const maxInt = int(^uint(0) >> 1)

func with(p preTokenizer, edit func(*preTokenizer)) preTokenizer {
	edit(&p)
	return p
}

var (
	keep = func(p *preTokenizer) { p.keepSpaces = true }

	// preTokenizers maps tokenizer.ggml.pre values to their pre-tokenizer,
	// as llama.cpp's llama_vocab::impl::load does. Names that need a regular
	// expression engine with lookahead beyond these scanners are absent and
	// rejected with ErrUnsupported.
	preTokenizers = map[string]preTokenizer{
		"":        preDefault,
		"default": preDefault,

		"llama3":       with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"llama-v3":     with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"llama-bpe":    with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"falcon3":      with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"falcon-h1":    with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"pixtral":      with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"midm-2.0":     with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"lfm2":         with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"jina-v5-nano": with(preLlama3, func(p *preTokenizer) { p.ignoreMerges, p.addBOS = true, true }),
		"dbrx":         preLlama3,
		"smaug-bpe":    preLlama3,
		"glm4":         with(preLlama3, func(p *preTokenizer) { p.noBOS = true }),
		"chatglm-bpe":  with(preLlama3, func(p *preTokenizer) { p.noBOS = true }),

		"qwen2":            preQwen2,
		"deepseek-r1-qwen": preQwen2,
		"kormo":            preQwen2,
		"f2llmv2":          preQwen2,
		"hunyuan":          preQwen2,
		"solar-open":       preQwen2,
		"grok-2":           preQwen2,
		"megrez":           with(preQwen2, func(p *preTokenizer) { p.keepSpaces = false }),
		"stablelm2":        with(preQwen2, func(p *preTokenizer) { p.keepSpaces = false }),
		"qwen35":           {splits: []splitter{splitQwen35}, keepSpaces: true},
		"laguna":           {splits: []splitter{splitNewlines, splitQwen2}, keepSpaces: true},

		"gpt-2":           preGPT2,
		"phi-2":           preGPT2,
		"jina-es":         preGPT2,
		"jina-de":         preGPT2,
		"gigachat":        preGPT2,
		"jina-v2-es":      preGPT2,
		"jina-v2-de":      preGPT2,
		"a.x-4.0":         preGPT2,
		"mellum":          preGPT2,
		"modern-bert":     preGPT2,
		"jina-v1-en":      preGPT2,
		"jina-v2-code":    preGPT2,
		"roberta-bpe":     preGPT2,
		"mpt":             preGPT2,
		"olmo":            preGPT2,
		"jais":            preGPT2,
		"exaone4":         preGPT2,
		"trillion":        with(preGPT2, keep),
		"granite-docling": with(preGPT2, keep),

		"falcon":     preFalcon,
		"starcoder":  preStarcoder,
		"refact":     preStarcoder,
		"codeshell":  preStarcoder,
		"exaone":     preStarcoder,
		"minerva-7b": preStarcoder,
		"mellum2":    preStarcoder,
		"command-r":  with(preStarcoder, keep),
		"smollm":     with(preStarcoder, keep),

		"deepseek-coder": {keepSpaces: true, splits: []splitter{
			one(isCRorLF).split,
			prefixed(isSpace, isLetter).split, // \s?\p{L}+
			prefixed(isSpace, isPunct).split,  // \s?\p{P}+
			run(isCJK).split,
			one(isNumber).split,
		}},
		"deepseek-llm": {keepSpaces: true, splits: []splitter{
			one(isCRorLF).split,
			prefixed(isSpace, deepseekLetters).split,
			prefixed(isSpace, deepseekPunct).split,
			matcher(trailingSpace).split, // \s+$
			run(isCJK).split,
			run(isNumber).split,
		}},

		"gpt-4o": preCaseWords,
		// IBM Granite Embedding multilingual R2's: gpt-4o's with combining
		// marks as letters, its merges' whole-word tokens taken first.
		"granite-embed-multi-97m": {splits: []splitter{matcher(caseWords{contractions: true, digits: 3, marks: true}.match).split},
			keepSpaces: true, ignoreMerges: true},
		"llama4":     preCaseWords,
		"kanana2":    preCaseWords,
		"talkie":     preCaseWords,
		"minimax-m2": preCaseWords,
		"tekken": {splits: []splitter{matcher(caseWords{digits: 1}.match).split},
			ignoreMerges: true, addBOS: true, keepSpaces: true},
		"deepseek-v3":   preDeepseekV3,
		"hunyuan-dense": preDeepseekV3,
		"joyai-llm":     preDeepseekV3,
		"seed-coder":    {splits: []splitter{scanner(llamaScanner{digits: 1, letter: clsLetter, bareSymbols: true}.scan)}, keepSpaces: true},
		"bailingmoe":    preQwen2,
		"bailingmoe2":   preQwen2,
		"llada-moe":     preQwen2,
		"minicpm5": {splits: []splitter{
			upTo(isNumber, 3).split, // \p{N}{1,3}, then the llama3 expression with \p{N}+
			scanner(llamaScanner{digits: maxInt, letter: clsLetter}.scan),
		}, ignoreMerges: true},

		"poro-chat":    prePoro,
		"bloom":        with(prePoro, func(p *preTokenizer) { p.keepSpaces = false }),
		"gpt3-finnish": with(prePoro, func(p *preTokenizer) { p.keepSpaces = false }),
		"viking":       {splits: []splitter{poroSplit, one(isNumber).split}, keepSpaces: true},

		"gemma4":                   preGemma4,
		"granite-embed-multi-311m": preGemma4,
		"sarvam-moe":               with(preGemma4, func(p *preTokenizer) { p.keepSpaces, p.wholeNewlines = true, false }),
	}
)
