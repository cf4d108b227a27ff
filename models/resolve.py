"""One resolver for every place a model is named (``compile``, ``sim``, ``cluster``,
``mesh-layer``, sweep workloads): ``resolve_model(text) -> ResolvedModel``.

Forms of ``text``, tried in this order:

* ``path/file.py:factory`` or ``*.onnx`` — the user's own module, loaded by
  :func:`tilewright.models.user_module.load_user_model` (``kind="user"``, ``module`` and
  ``example_inputs`` set);
* a Hugging Face ``config.json`` or a folder holding one — read by
  :func:`tilewright.models.hf_config.load_hf_config` (``kind="llm"``, ``config`` set; the
  config is registered under ``text``, so :func:`~tilewright.models.llm_shapes.get_config`
  and every name-keyed path take ``text`` as a model name);
* a built-in LLM config name (``kind="llm"``) or a demo MLP name (``kind="mlp"``).

Anything else is a :class:`~tilewright.models.llm_shapes.ModelInputError` listing the forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tilewright.models.demo_shapes import MLP_SHAPES
from tilewright.models.hf_config import looks_like_config
from tilewright.models.user_module import load_user_model
from tilewright.models.llm_shapes import (LLM_CONFIGS, LLMConfig, ModelInputError, builtin_names,
                                         get_config)

__all__ = ["ResolvedModel", "resolve_model", "model_form", "model_file", "FORMS",
           "refuse_user_model"]

FORMS = ("a built-in name (see `tilewright models`), a Hugging Face config.json or a folder "
         "holding one, path/file.py:factory, or a .onnx file")

_FACTORY = re.compile(r"^(?P<file>.+\.py):(?P<factory>[A-Za-z_][A-Za-z0-9_]*)$")

Form = Literal["builtin", "hf-config", "factory", "onnx", "mlp"]


def model_form(text: str) -> Form:
    """Which form ``text`` is written in (no file is read): ``factory`` (``file.py:name``),
    ``onnx``, ``hf-config`` (a ``.json`` or a folder), ``mlp`` (a demo MLP name) or ``builtin``
    (anything else: checked by :func:`resolve_model`)."""
    if _FACTORY.match(text):
        return "factory"
    if text.endswith(".onnx"):
        return "onnx"
    if text in LLM_CONFIGS:
        return "builtin"
    if looks_like_config(text):
        return "hf-config"
    if text in MLP_SHAPES:
        return "mlp"
    return "builtin"



def model_file(text: str) -> Path | None:
    """The file whose content decides the model ``text`` names (the factory's ``.py``, the
    ``.onnx``, the ``config.json`` itself or inside its folder), or None for a built-in name.
    A stored result keyed on ``text`` must also be keyed on this file's content."""
    form = model_form(text)
    if form == "factory":
        return Path(_FACTORY.match(text)["file"])  # type: ignore[index]
    if form == "onnx":
        return Path(text)
    if form == "hf-config":
        path = Path(text)
        return path / "config.json" if path.is_dir() else path
    return None

@dataclass
class ResolvedModel:
    """What :func:`resolve_model` found. ``name`` is the text to pass on as a model name."""

    name: str
    form: Form
    kind: Literal["llm", "mlp", "user"]
    config: LLMConfig | None = None
    module: Any = None
    example_inputs: tuple = ()


def resolve_model(text: str) -> ResolvedModel:
    """Resolve ``text`` (module doc); raises ModelInputError naming the accepted forms."""
    form = model_form(text)
    if form in ("factory", "onnx"):
        module, inputs = load_user_model(text)
        return ResolvedModel(text, form, "user", module=module, example_inputs=tuple(inputs))
    if form == "mlp":
        return ResolvedModel(text, form, "mlp")
    if form == "builtin" and text not in LLM_CONFIGS:
        raise ModelInputError(f"unknown model {text!r}: give {FORMS}; built-in: "
                              f"{', '.join(builtin_names())}")
    return ResolvedModel(text, form, "llm", config=get_config(text))


def refuse_user_model(text: str, where: str, needs: str) -> None:
    """Raise :class:`ModelInputError` (one line) when ``text`` names a user module
    (``file.py:factory`` or ``.onnx``) at a place (``where``, e.g. ``--model``) that needs an LLM
    config's shapes (``needs``: why); the line says which commands take the module instead."""
    if model_form(text) in ("factory", "onnx"):
        raise ModelInputError(f"{where} {text}: a user module has no LLM config; {needs} "
                              f"(`compile`, `sim` and a sweep's llm workloads take one)")
