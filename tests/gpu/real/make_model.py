"""A tiny random-weight Llama and its tokenizer, made offline (no hub): `make_model.py OUTDIR`; and, on a GPU machine,
a Llama large enough for its read to matter: `make_model.py --llama8b OUTDIR`.

OUTDIR/tiny      LlamaConfig(hidden 256, intermediate 512, 2 layers, 4 heads, 4 KV heads, vocab 1024), random
                 weights (normal, std 0.02) in bf16 safetensors, a byte-level BPE tokenizer trained by `tokenizers`
                 on a few sentences and wrapped as PreTrainedTokenizerFast (bos/eos/unk and a chat template).
OUTDIR/tiny-eos  the same with the final norm's weight zero: every logit is 0, so greedy decoding picks token 0,
                 which is the end of sequence: each generation answers 200 with empty text and one completion
                 token, as a real model does when its first token ends the sequence.
The weights are written with numpy alone (the safetensors layout: a little-endian header length, a JSON header,
the raw tensors), so the script runs on a machine without torch. Needs numpy, tokenizers and transformers.
OUTDIR/llama8b   (--llama8b only) Llama 3 8B's shape (hidden 4096, intermediate 14336, 32 layers, 32 heads, 8 KV
                 heads, vocabulary 128256: 8.03 B parameters, 16.06 GB), random bf16 weights drawn on the GPU with torch
                 (normal, std 0.02; norms 1) and written by safetensors.torch as shards of ~2 GB with their
                 index; the tokenizer of `tiny` (its 1024 ids are a part of the model's vocabulary). Needs torch with
                 CUDA and safetensors (the GPU machine has both), about 16 GB of disk and 3 GB of GPU memory.
"""
import json
import math
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


LLAMA8B = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
               rms_norm_eps=1e-5)
SHARD_BYTES = 2 * 10 ** 9


def llama8b_shapes(cfg):
    """[(name, shape)] of a LlamaForCausalLM's weights, in the order they are written."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * (h // cfg["num_attention_heads"])
    out = [("model.embed_tokens.weight", (v, h))]
    for n in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % n
        out += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (h, h)),
                (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
                (p + "self_attn.o_proj.weight", (h, h)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i))]
    return out + [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def make_llama8b(outdir, name="llama8b"):
    """The big model, its weights drawn on the GPU: about 16 GB written in well under a minute."""
    import torch  # pylint: disable=import-outside-toplevel
    from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel
    from transformers import GenerationConfig, LlamaConfig  # pylint: disable=import-outside-toplevel

    path = os.path.join(outdir, name)
    os.makedirs(path, exist_ok=True)
    cfg = LlamaConfig(bos_token_id=1, eos_token_id=0, tie_word_embeddings=False, **LLAMA8B)
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    cfg.save_pretrained(path)
    GenerationConfig(bos_token_id=1, eos_token_id=0).save_pretrained(path)
    tokenizer().save_pretrained(path)
    plan, size = [[]], 0  # the shards, planned first: each written as soon as its tensors are drawn
    for tname, shape in llama8b_shapes(LLAMA8B):
        if size >= SHARD_BYTES:
            plan.append([])
            size = 0
        plan[-1].append((tname, shape))
        size += 2 * math.prod(shape)
    gen = torch.Generator(device="cuda").manual_seed(0)
    weight_map, total = {}, 0
    for k, names in enumerate(plan):
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, len(plan))
        tensors = {}
        for tname, shape in names:
            if len(shape) == 1:
                t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
            else:
                t = torch.randn(shape, generator=gen, dtype=torch.float32, device="cuda").mul_(0.02).to(torch.bfloat16)
            tensors[tname] = t.cpu()
            weight_map[tname] = fname
            total += t.numel() * 2
            del t
        save_file(tensors, os.path.join(path, fname), metadata={"format": "pt"})
        del tensors
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1, sort_keys=True)
    return path, total, len(weight_map), len(plan)


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
    if sys.argv[1:2] == ["--llama8b"]:
        import time

        began = time.time()
        where, nbytes, ntensors, nshards = make_llama8b(sys.argv[2])
        print(json.dumps({"path": where, "bytes": nbytes, "tensors": ntensors, "shards": nshards,
                          "seconds": round(time.time() - began, 1)}))
    else:
        for made in make(sys.argv[1]).values():
            print(made)
