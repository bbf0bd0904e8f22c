"""A tiny random-weight Llama and its tokenizer, made offline (no hub): `make_model.py OUTDIR`.

OUTDIR/tiny      LlamaConfig(hidden 256, intermediate 512, 2 layers, 4 heads, 4 KV heads, vocab 1024), random
                 weights (normal, std 0.02) in bf16 safetensors, a byte-level BPE tokenizer trained by `tokenizers`
                 on a few sentences and wrapped as PreTrainedTokenizerFast (bos/eos/unk and a chat template).
OUTDIR/tiny-eos  the same with the final norm's weight zero: every logit is 0, so greedy decoding picks token 0,
                 which is the end of sequence: each generation answers 200 with empty text and one completion
                 token, as a real model does when its first token ends the sequence.
The weights are written with numpy alone (the safetensors layout: a little-endian header length, a JSON header,
the raw tensors), so the script runs on a machine without torch. Needs numpy, tokenizers and transformers.
"""
import json
import os
import struct
import sys

import numpy as np

HIDDEN, INTERMEDIATE, LAYERS, HEADS, KV_HEADS, VOCAB = 256, 512, 2, 4, 4, 1024
CONTEXT, LONG = 2048, 2 ** 21
EOS, BOS, UNK = "</s>", "<s>", "<unk>"  # ids 0, 1, 2: the end of sequence is token 0
SENTENCES = [
    "The capital city of France is Paris.",
    "A quick brown fox jumps over the lazy dog.",
    "SGLang serves large language models with a fast runtime.",
    "systemd starts the service and waits until the model is ready.",
    "Hello, how are you today? I am fine, thank you.",
    "One, two, three, four, five, six, seven, eight, nine, ten.",
]
CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def bf16(a):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        data = bf16(tensors[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def weights(rng, final_norm):
    def normal(*shape):
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    w = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN), "lm_head.weight": normal(VOCAB, HIDDEN),
         "model.norm.weight": np.full(HIDDEN, final_norm, dtype=np.float32)}
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            w[p + "self_attn.%s.weight" % proj] = normal(HIDDEN, HIDDEN)
        w[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        w[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        w[p + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    return w


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS, BOS, UNK],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES * 4, trainer)
    tok.post_processor = processors.TemplateProcessing(single=BOS + " $A", pair=BOS + " $A " + BOS + " $B",
                                                       special_tokens=[(BOS, tok.token_to_id(BOS))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, unk_token=UNK,
                                   model_max_length=2048)
    fast.chat_template = CHAT_TEMPLATE
    assert (fast.convert_tokens_to_ids(EOS), fast.convert_tokens_to_ids(BOS)) == (0, 1)
    return fast


def config():
    from transformers import GenerationConfig, LlamaConfig

    cfg = LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                      max_position_embeddings=CONTEXT, bos_token_id=1, eos_token_id=0, tie_word_embeddings=False)
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    return cfg, GenerationConfig(bos_token_id=1, eos_token_id=0)


def make(outdir):
    tok = tokenizer()
    cfg, gen = config()
    made = {}
    for name, final_norm, context in (("tiny", 1.0, CONTEXT), ("tiny-eos", 0.0, CONTEXT), ("tiny-long", 1.0, LONG)):
        path = os.path.join(outdir, name)
        os.makedirs(path, exist_ok=True)
        cfg.max_position_embeddings = context
        cfg.save_pretrained(path)
        gen.save_pretrained(path)
        tok.save_pretrained(path)
        write_safetensors(os.path.join(path, "model.safetensors"), weights(np.random.default_rng(0), final_norm))
        made[name] = path
    return made


if __name__ == "__main__":
    for made in make(sys.argv[1]).values():
        print(made)
