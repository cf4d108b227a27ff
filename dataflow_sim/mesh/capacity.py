"""Whole-model SRAM capacity of a wafer-scale mesh: the one place bytes per core are added up.

Every mesh command checks a :class:`Capacity` before timing anything. Per core (bytes):

* **weights** — every layer's weight matrices as the partition places them: a ``[k, n]``
  matrix on a ``pr x pc`` grid leaves a ``ceil(k/pr) x ceil(n/pc)`` block on each core
  (:func:`weight_block_bytes`); the layer's weight ops are the ``weight`` ops of
  :func:`tilewright.compiler.mesh_partition.decoder_layer_ops`. MoE layers: attention and router
  over the whole grid, each expert's ``w1, w3, w2`` over its own region (the largest region
  block counts). Embedding table and LM head (``vocab x d`` each, one if tied) over the grid.
* **KV cache** — tokens on the rows, a token's ``2 x kv_heads x head_dim`` features on the
  columns, every layer: ``ceil(tokens / pr) * ceil(2 kvd / pc) * elem_bytes * layers``
  (the shift-based cache fills every row evenly; prefill leaves the prompt's cache).
* **buffers** — the largest working set of any one op of the layer, as the partition declares
  it (``memory_bytes_per_core`` of its mesh tasks: operand blocks in flight, partial sums).
  The op in flight's weight block is counted both as resident weights and in its working set:
  an over-estimate of at most one block.

A plan over several wafers (:func:`wafer_stages`) gives each wafer a contiguous run of layers;
the first wafer also holds the embedding table, the last the LM head.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilewright.arch import ArchSpec
from tilewright.compiler.errors import MeshMappingError
from tilewright.compiler.mesh_partition import decoder_layer_ops

__all__ = ["Capacity", "MeshCapacityError", "weight_block_bytes", "llama_layer_weight_bytes",
           "kv_bytes_per_core", "llama_capacity", "moe_layer_weight_bytes", "moe_capacity",
           "embedding_bytes", "wafer_stages", "program_buffer_bytes", "gemm_capacity",
           "gemv_capacity"]


class MeshCapacityError(MeshMappingError):
    """The model (weights + KV cache + buffers) does not fit the wafer's SRAM per core; the
    message gives the bytes per core needed, split, against the core's SRAM."""


@dataclass(frozen=True)
class Capacity:
    """Bytes per core a run needs on one wafer (``grid``: the logical grid the partition uses)."""

    what: str
    grid: str
    weight_bytes: int
    kv_bytes: int
    buffer_bytes: int
    sram_bytes: int

    @property
    def total(self) -> int:
        return self.weight_bytes + self.kv_bytes + self.buffer_bytes

    @property
    def fits(self) -> bool:
        return self.total <= self.sram_bytes

    def message(self) -> str:
        return (f"{self.what} needs {self.total:,} B per core on the {self.grid} grid (weights "
                f"{self.weight_bytes:,} + KV cache {self.kv_bytes:,} + buffers "
                f"{self.buffer_bytes:,}) but a core has {self.sram_bytes:,} B of SRAM "
                f"(mesh.core_sram_kib)")

    def check(self, hint: str = "") -> "Capacity":
        """Raise :class:`MeshCapacityError` when the run does not fit; else return self."""
        if not self.fits:
            raise MeshCapacityError(self.message() + (f"; {hint}" if hint else ""))
        return self

    def summary(self) -> dict:
        return {"grid": self.grid, "weight_bytes_per_core": self.weight_bytes,
                "kv_bytes_per_core": self.kv_bytes, "buffer_bytes_per_core": self.buffer_bytes,
                "bytes_per_core": self.total, "sram_bytes_per_core": self.sram_bytes}


def _sram(arch: ArchSpec) -> int:
    return int(arch.mesh.core_sram_kib * 1024)


def weight_block_bytes(k: int, n: int, pr: int, pc: int, elem_bytes: int) -> int:
    """Bytes of one core's block of a ``[k, n]`` matrix, K on ``pr`` rows, N on ``pc`` columns."""
    return -(-k // pr) * -(-n // pc) * elem_bytes


def llama_layer_weight_bytes(cfg, phase: str, pr: int, pc: int, elem_bytes: int) -> int:
    """One decoder layer's weight bytes per core (its ``weight`` ops, as the partition places
    them on a ``pr x pc`` grid)."""
    ops = decoder_layer_ops(cfg, phase, tokens=1, context=1, pr=pr, pc=pc)
    return sum(weight_block_bytes(o.k, o.n, pr, pc, elem_bytes) for o in ops if o.weight)


def kv_bytes_per_core(cfg, tokens: int, pr: int, pc: int, elem_bytes: int, layers: int) -> int:
    """KV cache of ``tokens`` tokens over ``layers`` layers, per core (see module doc); 0 for a
    model without attention."""
    if not getattr(cfg, "n_heads", None):
        return 0
    kvd = cfg.n_kv_heads * (cfg.d_model // cfg.n_heads)
    return -(-tokens // pr) * -(-2 * kvd // pc) * elem_bytes * layers


def embedding_bytes(cfg, pr: int, pc: int, elem_bytes: int) -> tuple[int, int]:
    """(embedding table, LM head) bytes per core: ``[vocab, d]`` and ``[d, vocab]`` blocks; a
    tied head shares the table (0); a config without a vocabulary: (0, 0)."""
    v = getattr(cfg, "vocab_size", None)
    if not v:
        return 0, 0
    table = weight_block_bytes(v, cfg.d_model, pr, pc, elem_bytes)
    head = 0 if getattr(cfg, "tie_embeddings", False) else \
        weight_block_bytes(cfg.d_model, v, pr, pc, elem_bytes)
    return table, head


def wafer_stages(n_layers: int, wafers: int) -> list[int]:
    """Layers per wafer: ``n_layers`` split into ``wafers`` contiguous runs, the first ones one
    longer when it does not divide."""
    base, extra = divmod(n_layers, wafers)
    return [base + (i < extra) for i in range(wafers)]


def _stage_weights(per_layer: int, emb: tuple[int, int], layers: int, i: int, n: int) -> int:
    return per_layer * layers + (emb[0] if i == 0 else 0) + (emb[1] if i == n - 1 else 0)


def llama_capacity(arch: ArchSpec, cfg, phase: str, *, tokens: int, context: int, pr: int,
                   pc: int, elem_bytes: int, buffer_bytes: int, wafers: int = 1) -> Capacity:
    """The fullest wafer of ``cfg`` split over ``wafers`` wafers (one by default): prefill holds
    ``tokens`` prompt tokens' KV, decode ``context`` cached tokens'."""
    per_layer = llama_layer_weight_bytes(cfg, phase, pr, pc, elem_bytes)
    emb = embedding_bytes(cfg, pr, pc, elem_bytes)
    held = tokens if phase == "prefill" else context
    stages = wafer_stages(cfg.n_layers, wafers)
    caps = [Capacity(_what(cfg, phase, held, wafers, i, n_l), f"{pr}x{pc}",
                     _stage_weights(per_layer, emb, n_l, i, wafers),
                     kv_bytes_per_core(cfg, held, pr, pc, elem_bytes, n_l), buffer_bytes,
                     _sram(arch)) for i, n_l in enumerate(stages)]
    return max(caps, key=lambda c: c.total)


def _what(cfg, phase: str, held: int, wafers: int, i: int, layers: int) -> str:
    name = getattr(cfg, "name", "model")
    tok = f"{held} prompt tokens" if phase == "prefill" else f"context {held}"
    where = f"wafer {i + 1} of {wafers} ({layers} layers)" if wafers > 1 else \
        f"all {layers} layers on one wafer"
    return f"{name} {phase} ({tok}; {where})"


def moe_layer_weight_bytes(cfg, phase: str, grid, regions, elem_bytes: int) -> int:
    """One MoE layer's weight bytes on the fullest core: attention (``wq|wk|wv``, ``wo``) and the
    router over ``grid``, plus the largest expert region's ``w1, w3, w2`` blocks (``regions``:
    one Grid per expert, then the shared experts' when present)."""
    d, e, f = cfg.d_model, cfg.n_experts, cfg.d_expert_ffn
    pr, pc = grid.pr, grid.pc
    attn = 0
    if getattr(cfg, "n_heads", None):
        kvd = cfg.n_kv_heads * (d // cfg.n_heads)
        attn = weight_block_bytes(d, d + 2 * kvd, pr, pc, elem_bytes) + \
            weight_block_bytes(d, d, pr, pc, elem_bytes)
    router = weight_block_bytes(d, e, pr, pc, elem_bytes)
    widths = [f] * e + ([cfg.n_shared_experts * f] if cfg.n_shared_experts else [])
    expert = max(2 * weight_block_bytes(d, w, r.pr, r.pc, elem_bytes)
                 + weight_block_bytes(w, d, r.pr, r.pc, elem_bytes)
                 for r, w in zip(regions, widths))
    return attn + router + expert


def moe_capacity(arch: ArchSpec, cfg, phase: str, *, tokens: int, context: int, batch: int,
                 grid, regions, elem_bytes: int, buffer_bytes: int, wafers: int = 1) -> Capacity:
    """Like :func:`llama_capacity` for an MoE model (``batch`` decode tokens, each with its own
    ``context``-token KV cache); ``cfg.n_dense_layers`` count as MoE layers (an
    over-estimate when their dense FFN is smaller than the experts' share)."""
    per_layer = moe_layer_weight_bytes(cfg, phase, grid, regions, elem_bytes)
    emb = embedding_bytes(cfg, grid.pr, grid.pc, elem_bytes)
    held = tokens if phase == "prefill" else context * batch
    stages = wafer_stages(cfg.n_layers, wafers)
    caps = [Capacity(_what(cfg, phase, held, wafers, i, n_l), f"{grid.pr}x{grid.pc}",
                     _stage_weights(per_layer, emb, n_l, i, wafers),
                     kv_bytes_per_core(cfg, held, grid.pr, grid.pc, elem_bytes, n_l),
                     buffer_bytes, _sram(arch)) for i, n_l in enumerate(stages)]
    return max(caps, key=lambda c: c.total)


def program_buffer_bytes(program) -> int:
    """The largest ``memory_bytes_per_core`` of a mesh Program's tasks (one op's working set)."""
    return max((t.memory_bytes_per_core for t in program.tasks), default=0)


def gemm_capacity(arch: ArchSpec, m: int, k: int, n: int, p: int, algo: str,
                  elem_bytes: int) -> Capacity:
    """``mesh gemm``: B ``[k, n]`` is the resident operand (weights), A and C blocks and the
    algorithm's extra receive copies (2 of each operand, 3 for SUMMA) are buffers."""
    mt, kt, nt = -(-m // p), -(-k // p), -(-n // p)
    nbuf = 3 if algo == "summa" else 2
    w = kt * nt * elem_bytes
    buf = nbuf * mt * kt * elem_bytes + (nbuf - 1) * w + mt * nt * elem_bytes
    return Capacity(f"gemm [{m},{k}]x[{k},{n}] ({algo})", f"{p}x{p}", w, 0, buf, _sram(arch))


def gemv_capacity(arch: ArchSpec, k: int, n: int, pr: int, pc: int,
                  elem_bytes: int) -> Capacity:
    """``mesh gemv``: the W block is weights; the x segment, partial y and receive buffer are
    buffers."""
    kt, nt = -(-k // pr), -(-n // pc)
    return Capacity(f"gemv [1,{k}]x[{k},{n}]", f"{pr}x{pc}", kt * nt * elem_bytes, 0,
                    kt * elem_bytes + 2 * nt * elem_bytes, _sram(arch))
