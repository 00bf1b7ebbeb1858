"""Build a tiny random Llama and its tokenizer in a folder, offline (no hub, no downloaded weights).

The model is only meant to make a real vLLM engine do real scheduling work on a CPU: two layers,
``head_dim`` 64 (vLLM's CPU attention rejects 16), random weights, a byte-level BPE tokenizer trained
on a few lines of text. Token ids below ``vocab_size`` are all valid prompts, which is how the load
generator controls prompt lengths and shared prefixes exactly. The output head is its own matrix (not
tied to the embeddings, whose random model would just repeat its input), so two seeds give two models
with different greedy answers under the same name: the lane's "model swapped" scenario.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRAINING_TEXT = [
    "the watchdog scrapes the engine and evaluates rules every second",
    "a long prompt fills the key value cache and forces preemption",
    "requests wait in the queue when the cache is full",
    "clients that time out retry and the engine decodes answers nobody reads",
    "a shared system prompt is cached once and reused by every request",
    "the quick brown fox jumps over the lazy dog near the river bank",
    "graphics processors serve large language models to many users at once",
]

VOCAB_SIZE = 512
HIDDEN_SIZE = 128
NUM_HEADS = 2  # head_dim = 128 / 2 = 64
NUM_LAYERS = 2
MAX_POSITIONS = 8192
FORMAT = 2  # bump when build() changes what it writes: ensure() rebuilds older folders


def build(out: Path, seed: int = 0) -> dict[str, int]:
    """Write config, safetensors weights and tokenizer files to *out*; return the model's key sizes."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TRAINING_TEXT * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.model_max_length = MAX_POSITIONS
    fast.save_pretrained(str(out))
    vocab = tok.get_vocab_size()

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,  # an lm_head of its own: the greedy output depends on the seed
    )
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(str(out))
    sizes = {"vocab_size": vocab, "hidden_size": HIDDEN_SIZE, "layers": NUM_LAYERS, "max_positions": MAX_POSITIONS,
             "seed": seed, "format": FORMAT}
    (out / "tiny-model.json").write_text(json.dumps(sizes) + "\n")
    return sizes


def ensure(out: Path, seed: int = 0) -> dict[str, int]:
    """The model in *out*, built unless it is there already from this seed and :data:`FORMAT`."""
    meta = out / "tiny-model.json"
    if meta.exists():
        sizes: dict[str, int] = json.loads(meta.read_text())
        if sizes.get("seed") == seed and sizes.get("format") == FORMAT:
            return sizes
    return build(out, seed)


def main() -> None:
    """CLI: ``tiny_model.py OUT_DIR`` builds the model and prints its sizes as JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(ensure(args.out, args.seed)))


if __name__ == "__main__":
    main()
