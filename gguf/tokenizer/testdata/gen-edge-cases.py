#!/usr/bin/env python3
"""Regenerates edge-cases.json: ids that llama.cpp's llama-tokenize gives for
inputs the upstream vectors do not cover (empty input, whitespace runs,
emoji, invalid UTF-8, special tokens, BOS). Usage:

    gen-edge-cases.py LLAMA_CPP_DIR > edge-cases.json

LLAMA_CPP_DIR holds bin/llama-tokenize and src/models/ggml-vocab-*.gguf.
"""
import base64, json, os, subprocess, sys, tempfile

VOCABS = ["llama-spm", "phi-3", "gpt-2", "llama-bpe", "qwen2", "falcon"]

TEXTS = [
    b"", b" ", b"   ", b"\t\t", b"\n", b"\n\n\n", b" \n \n", b"\r\n\r\n", b"a  b   c",
    b"trailing   ", b"   leading", "\u00a0\u3000 unicode\u2003spaces".encode(),
    "\U0001F44D\U0001F3FD".encode(), "\U0001F468\u200D\U0001F469\u200D\U0001F467 family".encode(),
    "\U0001F999\U0001F999".encode(), "\u2581already escaped \u2581\u2581".encode(),
    b"\xff", b"abc\x80def", b"\xe2\x82", b"\xc3(", b"\xed\xa0\x80", b"\xc0\x80", b"ok\xf0\x9f\x98",
    "Ελληνικά русский 中文 日本語 한국어 العربية हिन्दी".encode(),
    b"1234567890 12.5 1,000,000", b"def f(x):\n\treturn x**2  # comment\n",
    b"<s>hi</s>", b"<|im_start|>user\nhi<|im_end|>\n", b"<|user|>  hello<|end|>\n<|assistant|>",
    b"<|endoftext|> after", b"I'm can't WE'LL they're", b"a" * 300,
]


def tokenize(tool, model, text, bos, special):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(text)
    try:
        args = [tool, "-m", model, "-f", f.name, "--ids", "--log-disable", "--no-escape"]
        if not bos:
            args.append("--no-bos")
        if not special:
            args.append("--no-parse-special")
        out = subprocess.run(args, check=True, capture_output=True).stdout.decode()
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def main():
    root = sys.argv[1]
    tool = os.path.join(root, "bin", "llama-tokenize")
    cases = []
    for vocab in VOCABS:
        model = os.path.join(root, "src", "models", "ggml-vocab-%s.gguf" % vocab)
        for text in TEXTS:
            for bos, special in ((False, False), (True, True)):
                cases.append({
                    "vocab": vocab,
                    "input": base64.b64encode(text).decode(),
                    "add_bos": bos,
                    "parse_special": special,
                    "ids": tokenize(tool, model, text, bos, special),
                })
    json.dump({"generator": "llama.cpp llama-tokenize (AddSpecial = add_bos && the vocab adds BOS)",
               "cases": cases}, sys.stdout, indent=0)
    sys.stdout.write("\n")


main()
