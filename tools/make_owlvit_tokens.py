"""Write runner/configs/owlvit/text_inputs.json: the seed's OwlViT text queries as CLIP token ids.

OwlViT with random weights runs offline, so it has no tokenizer files. The CLIP BPE vocabulary
ships inside the open-clip-torch wheel (open_clip/bpe_simple_vocab_16e6.txt.gz); this script builds
a transformers ``CLIPTokenizer`` from it, set up the way the OwlViT conversion script sets up the
hub's tokenizer (pad token "!", model_max_length 16), and tokenizes the queries as
``OwlViTProcessor`` does (padding="max_length"). It cross-checks the ids against open_clip's own
``SimpleTokenizer`` from the same wheel.

    pip download --no-deps open-clip-torch -d /tmp/oc
    python tools/make_owlvit_tokens.py /tmp/oc/open_clip_torch-*.whl
"""
import argparse
import gzip
import json
import sys
import tempfile
import types
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner.inputs import TEXT_QUERIES  # noqa: E402

OUT = REPO / "runner" / "configs" / "owlvit" / "text_inputs.json"
BPE_MEMBER = "open_clip/bpe_simple_vocab_16e6.txt.gz"
TOKENIZER_MEMBER = "open_clip/tokenizer.py"
MAX_LENGTH = 16  # OwlViT's text max_position_embeddings; the hub tokenizer's model_max_length
NUM_MERGES = 49152 - 256 - 2  # the merges CLIP uses, as in CLIPTokenizer and open_clip


def bpe_lines(wheel):
    with zipfile.ZipFile(wheel) as archive:
        return gzip.decompress(archive.read(BPE_MEMBER)).decode("utf-8").split("\n")


def clip_vocab(merges, byte_symbols):
    """CLIP's vocabulary, in CLIP's order: bytes, bytes + </w>, merges, the two special tokens."""
    tokens = list(byte_symbols) + [symbol + "</w>" for symbol in byte_symbols]
    tokens += ["".join(merge.split()) for merge in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {token: index for index, token in enumerate(tokens)}


def hf_tokenize(lines, byte_symbols, folder):
    from transformers import CLIPTokenizer

    merges = lines[1 : NUM_MERGES + 1]
    vocab_file, merges_file = Path(folder) / "vocab.json", Path(folder) / "merges.txt"
    vocab_file.write_text(json.dumps(clip_vocab(merges, byte_symbols)))
    merges_file.write_text("\n".join(["#version: 0.2"] + merges) + "\n")
    tokenizer = CLIPTokenizer(str(vocab_file), str(merges_file), pad_token="!", model_max_length=MAX_LENGTH)
    encoded = tokenizer(list(TEXT_QUERIES), padding="max_length", max_length=MAX_LENGTH)
    return [list(ids) for ids in encoded["input_ids"]], [list(mask) for mask in encoded["attention_mask"]]


def open_clip_module(wheel, folder):
    """open_clip's tokenizer module from the wheel (ftfy stubbed: the queries are plain ASCII)."""
    sys.modules.setdefault("ftfy", types.SimpleNamespace(fix_text=lambda text: text))
    with zipfile.ZipFile(wheel) as archive:
        archive.extract(TOKENIZER_MEMBER, folder)
        archive.extract(BPE_MEMBER, folder)
    namespace = {"__name__": "open_clip_tokenizer", "__file__": str(Path(folder) / TOKENIZER_MEMBER)}
    exec(compile((Path(folder) / TOKENIZER_MEMBER).read_text(), TOKENIZER_MEMBER, "exec"), namespace)
    return namespace


def open_clip_tokenize(module, folder):
    tokenizer = module["SimpleTokenizer"](str(Path(folder) / BPE_MEMBER))
    return tokenizer(list(TEXT_QUERIES), context_length=MAX_LENGTH).tolist()


def compact_json(record):
    """One key a line, lists inline: small diffs, easy to read."""
    lines = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in record.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", help="an open_clip_torch-*.whl (pip download --no-deps open-clip-torch)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        module = open_clip_module(args.wheel, folder)
        byte_symbols = module["bytes_to_unicode"]().values()
        input_ids, attention_mask = hf_tokenize(bpe_lines(args.wheel), byte_symbols, folder)
        reference = open_clip_tokenize(module, folder)
    if reference != input_ids:
        raise SystemExit(f"CLIPTokenizer {input_ids} != open_clip {reference}: not writing {OUT}")
    record = {
        "texts": list(TEXT_QUERIES),
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "max_length": MAX_LENGTH,
        "source": "CLIP BPE vocab bpe_simple_vocab_16e6 from " + Path(args.wheel).name
        + "; CLIPTokenizer(pad_token='!', model_max_length=16), padding='max_length'; "
        "cross-checked with open_clip SimpleTokenizer; written by tools/make_owlvit_tokens.py",
    }
    OUT.write_text(compact_json(record))
    print(f"wrote {OUT}: {input_ids}")


if __name__ == "__main__":
    main()
