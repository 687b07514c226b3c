"""Decoding at lower precision: speed and the change of the mean gap against float32, in one run.

For each shipped model of --models (TSP50, CVRP50, TSP100 by default) and each decode of --decodes, on
the first --instances instances of its test set (shipped references), one thread, this run times and
scores:
- fp32: the model as it is (the baseline of every ratio);
- int8: torch's dynamic quantization of the Linear layers (per output channel; the attention's q, k and v
  first fused into one Linear so that they are quantized too; the layers whose weights the decoder reads
  directly stay float32);
- bf16: bfloat16 autocast over the whole decode, except the decoder's glimpse and logits, kept in float32
  so that ties between actions are not made by rounding.
Each line prints instances/s and its ratio to fp32, and the mean gap and its change in points. A
precision keeps the tours when the change is within 0.05 points (the tolerance ``eval.py`` would need to
offer it). Nothing of this is in the product: it measures whether it should be.

    python bench/precision.py
    python bench/precision.py --models tsp50 --decodes greedy multi-greedy --instances 500
"""

import argparse
import copy
import sys
import time
import warnings

import numpy as np
import torch
from ppoor.data.datasets import load_data
from ppoor.models import attention_model as am
from ppoor.search import Decoding, decode
from ppoor.search.solver import Model
from torch import nn
from torch.nn import functional as F

KEPT = {"decoder.glimpse_out", "decoder.project_context", "critic.0"}
"""Linear layers whose ``.weight`` the model reads directly (a quantized layer has none)."""


class FusedAttention(nn.Module):
    """``am.MultiHeadAttention`` with q, k and v in one Linear layer (the same products)."""

    def __init__(self, attention: am.MultiHeadAttention):
        super().__init__()
        weight = torch.cat([attention.query.weight, attention.key.weight, attention.value.weight])
        self.num_heads, self.out = attention.num_heads, attention.out
        self.qkv = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.qkv.weight.data.copy_(weight)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k, v = (am.split_heads(x, self.num_heads) for x in self.qkv(h).chunk(3, dim=-1))
        return self.out(am.merge_heads(F.scaled_dot_product_attention(q, k, v)))


class Float32Decoder(nn.Module):
    """The decoder step in float32 inside a bfloat16 autocast (its cache and query cast up)."""

    def __init__(self, decoder: am.Decoder):
        super().__init__()
        self.inner = decoder

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)

    def forward(self, cache, query, mask, dynamic=None):
        with torch.autocast("cpu", enabled=False):
            up = None if dynamic is None else tuple(x.float() for x in dynamic)
            return self.inner(am.Cache(*(x.float() for x in cache)), query.float(), mask, up)


def int8(agent):
    """A copy of ``agent`` with its Linear layers dynamically quantized to int8 (per output channel)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    lowered = copy.deepcopy(agent)
    for parent in list(lowered.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, am.MultiHeadAttention):
                setattr(parent, name, FusedAttention(child))
    spec = {name: per_channel_dynamic_qconfig for name, module in lowered.named_modules()
            if isinstance(module, nn.Linear) and name not in KEPT}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        return quantize_dynamic(lowered, spec, dtype=torch.qint8)


def bf16(agent):
    """A copy of ``agent`` whose decoder step runs in float32 under a bfloat16 autocast."""
    lowered = copy.deepcopy(agent)
    lowered.decoder = Float32Decoder(lowered.decoder)
    return lowered


def timed(agent, instances: dict, decoding: Decoding, autocast: bool) -> tuple[float, np.ndarray]:
    """(instances/s, lengths [B]) of one decode after a warm-up on 4 instances."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        decode(agent, {k: v[:4] for k, v in instances.items()}, decoding)
        start = time.perf_counter()
        result = decode(agent, instances, decoding)
    return len(result.lengths) / (time.perf_counter() - start), result.lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tsp50", "cvrp50", "tsp100"])
    parser.add_argument("--decodes", nargs="+", default=["greedy", "multi-greedy"], choices=["greedy", "multi-greedy"])
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=100)
    args = parser.parse_args()
    if args.instances < 4 or args.batch_size < 1:
        sys.exit("error: --instances at least 4, --batch-size at least 1")
    torch.set_num_threads(1)
    print(f"one thread, the first {args.instances} test instances of each model's set; gap change in points")
    for name in args.models:
        model = Model(name, device="cpu")
        (data,) = load_data("test", model.problem, model.num_nodes, args.instances)
        agents = {"fp32": (model.agent, False), "int8": (int8(model.agent), False), "bf16": (bf16(model.agent), True)}
        for strategy in args.decodes:
            decoding = Decoding(strategy, batch_size=args.batch_size)
            rows, base = [], None
            for label, (agent, autocast) in agents.items():
                rate, lengths = timed(agent, data.instances, decoding, autocast)
                gap = 100 * float(np.mean(lengths / data.references - 1))
                base = base or (rate, gap)
                rows.append(f"{label} {rate:7.1f}/s (x{rate / base[0]:.2f}) gap {gap:.3f}% ({gap - base[1]:+.3f})")
            print(f"{name} {strategy:<13} " + " | ".join(rows), flush=True)


if __name__ == "__main__":
    main()
