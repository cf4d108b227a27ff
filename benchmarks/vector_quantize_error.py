"""Where the logits error of ``generate --vector`` comes from when the activations' quantize runs
on the vector engine: the Q8.8 rounding of its input, or its power-of-two scale.

    python benchmarks/vector_quantize_error.py [--models tiny-llama,tiny-moe,tiny-mamba]
        [--arch configs/ws8x8v.yaml] [--prompt-ids 1,2,3] [--tokens 2]

Runs ``generate --vector`` (functional model, no RTL) three times per model, the activations'
per-tensor int8 quantize (``QuantizeTask``) done three ways, everything else as ``--vector``:

* ``host``: ``formats.quantize`` of the fp32 tensor (scale ``amax / 127``, round half to even) —
  what ``--vector`` did before the quantize moved to the vector engine;
* ``q88``: ``formats.quantize`` of the tensor rounded to Q8.8 first (the vector engine's input);
* ``unit``: the vector engine's (``qshift``, then ``requant`` by 1 and the shift: scale
  ``2**(k - 8)``, round half up) — what ``--vector`` does now.

Prints per model and way the tokens, whether they equal torch fp32 greedy decoding, and the
worst logits relative L2 error over the steps. The ``host`` and ``q88`` ways replace the
quantize's answer by wrapping :class:`~tilewright.dataflow_sim.vector_offload.VectorUnitOps`
(the hook ``generate`` installs), for this measurement only.
"""

from __future__ import annotations

import argparse

import numpy as np

from tilewright.app.flows import generate as gen
from tilewright.arch import load_arch
from tilewright.compiler.program import QuantizeTask
from tilewright.dataflow_sim import vector_offload
from tilewright.dataflow_sim.vector_numerics import to_fixed
from tilewright.formats import quantize

WAYS = ("host", "q88", "unit")
#: the hook generate installs (kept: the loop below replaces the module's name)
UNIT_OPS = vector_offload.VectorUnitOps


def _hook_class(way: str):
    """VectorUnitOps answering per-tensor int8 quantize tasks the ``way`` way."""
    if way == "unit":
        return UNIT_OPS

    class Ops(UNIT_OPS):
        def __call__(self, task, ins):
            if isinstance(task, QuantizeTask) and task.granularity == "tensor":
                if way == "host":
                    return None                        # the functional model's formats.quantize
                x = (to_fixed(ins[0]) / 256.0).astype(np.float32)
                q = quantize(x, task.format, axis=task.axis, granularity="tensor")
                return q.values, q.scales
            return super().__call__(task, ins)
    return Ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny-llama,tiny-moe,tiny-mamba")
    ap.add_argument("--arch", default="configs/ws8x8v.yaml")
    ap.add_argument("--prompt-ids", default="1,2,3")
    ap.add_argument("--tokens", type=int, default=2)
    args = ap.parse_args()
    arch = load_arch(args.arch)
    prompt = [int(t) for t in args.prompt_ids.split(",")]
    print("model\tway\ttokens\t= torch\tworst logits rel L2")
    try:
        for model in args.models.split(","):
            for way in WAYS:
                vector_offload.VectorUnitOps = _hook_class(way)
                res = gen.generate(model, arch, prompt, args.tokens, vector=True)
                worst = max((s.rel_l2 for s in res.steps if not np.isnan(s.rel_l2)),
                            default=float("nan"))
                print(f"{model}\t{way}\t{res.tokens}\t{res.tokens == res.torch_tokens}\t"
                      f"{worst:.4f}")
    finally:
        vector_offload.VectorUnitOps = UNIT_OPS


if __name__ == "__main__":
    main()
