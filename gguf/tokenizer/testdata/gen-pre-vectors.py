#!/usr/bin/env python3
"""Regenerates pre-vectors.json: ids llama.cpp's llama-tokenize gives for
the llama-bpe vocabulary relabelled with other tokenizer.ggml.pre values, so
each pre-tokenizer is checked on the same merges. Usage:

    gen-pre-vectors.py LLAMA_CPP_DIR > pre-vectors.json

LLAMA_CPP_DIR holds bin/llama-tokenize, src/gguf-py and src/models (gguf-py
needs python3-numpy and python3-tqdm).
"""
import base64, json, os, subprocess, sys, tempfile

PRES = ["gpt-4o", "tekken", "deepseek-v3", "seed-coder", "bailingmoe", "minicpm5", "granite-embed-multi-97m"]

EXTRA = [
    "HELLOworld helloWorld ÉCOLEétudiant ΑΒΓαβγ McDonald's I'M WE'LL they'RE",
    "naïve café résumé (ノート) 가나다 漢字かなカナ",
    "Ich heiße Ünal. e\u0301 a\u0300\u0301b",
    "path/to/file\r\n\r\nx = a/b;\n\n\ty",
    "1234567 12,345.678 ٣٤٥ ⅷ",
    "it's 'quoted' '' don't I'd you'll",
    "   \u00a0  tabs\t\tand\u3000spaces   ",
    "<html><body>Hello</body></html>",
    # Combining marks (\p{M}), which granite-embed-multi-97m counts with letters.
    "नमस्ते दुनिया हिंदी में लिखा है। বাংলা ভাষা ভালো। สวัสดีครับ ภาษาไทย తెలుగు భాష",
    "Ca\u0301fe\u0301 ABC\u0301def a\u0308b\u0308C'S x\u0301'll 12\u0301",
]


def tokenize(tool, model, text):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(text)
    try:
        out = subprocess.run([tool, "-m", model, "-f", f.name, "--ids", "--log-disable", "--no-escape",
                              "--no-bos", "--no-parse-special"], check=True, capture_output=True).stdout.decode()
    finally:
        os.unlink(f.name)
    return json.loads(out.strip().splitlines()[-1])


def main():
    root = sys.argv[1]
    tool = os.path.join(root, "bin", "llama-tokenize")
    models = os.path.join(root, "src", "models")
    raw = open(os.path.join(models, "ggml-vocab-llama-bpe.gguf.inp"), "rb").read()
    texts = raw.split(b"\n__ggml_vocab_test__\n")
    if texts and texts[-1] == b"":
        texts.pop()
    texts += [t.encode() for t in EXTRA]
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "src", "gguf-py"))
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRES:
            model = os.path.join(tmp, pre + ".gguf")
            subprocess.run([sys.executable, os.path.join(root, "src", "gguf-py", "gguf", "scripts", "gguf_new_metadata.py"),
                            os.path.join(models, "ggml-vocab-llama-bpe.gguf"), model, "--pre-tokenizer", pre, "--force"],
                           check=True, capture_output=True, env=env)
            for text in texts:
                cases.append({"pre": pre, "input": base64.b64encode(text).decode(), "ids": tokenize(tool, model, text)})
            os.unlink(model)
    sys.stdout.write('{"generator": "llama.cpp llama-tokenize on ggml-vocab-llama-bpe.gguf with tokenizer.ggml.pre replaced",\n"cases": [\n')
    sys.stdout.write(",\n".join(json.dumps(c) for c in cases))
    sys.stdout.write("\n]}\n")


main()
