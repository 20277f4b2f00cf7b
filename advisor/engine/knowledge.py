"""What the engine knows about speculation without a network: drafts and heads per target family, and
acceptance priors.

Every entry names its source: acceptance priors from the published figures collected in the reference notes (priors.md), drafts from vLLM's
docs and tests. Model and GPU tables live in `advisor.hardware`, vLLM's keys in `advisor.vllm_vocab`.
"""
from __future__ import annotations

from dataclasses import dataclass

from advisor.hardware import ModelSpec

# --------------------------------------------------------------------------------------------------------
# Known drafts and heads per target family, and acceptance priors (priors.md; "needs verification").
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftSpec:
    """A draft or head that exists for a target family.

    `forwards_per_step`: "k" for autoregressive drafting (k sequential forwards), "1" for drafts that
    propose a whole block in one forward (dflash). `draft_params` is what one draft forward reads.
    """

    method: str
    model: str | None  # None: the target's own MTP layers
    families: tuple[str, ...]
    draft_params: float
    parallel: bool
    source: str


DRAFTS: tuple[DraftSpec, ...] = (
    DraftSpec("draft_model", "meta-llama/Llama-3.2-1B-Instruct", ("llama3",), 1.24e9, False,
              "same Llama 3 tokenizer and vocabulary (128,256), config.json of both models"),
    DraftSpec("draft_model", "Qwen/Qwen3-0.6B", ("qwen3",), 0.6e9, False,
              "vLLM docs, Draft Models example (Qwen/Qwen3-0.6B for Qwen3); vocabulary 151,936 on both"),
    DraftSpec("eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", ("llama3",), 0.25e9, False,
              "vLLM tests/v1/spec_decode/test_acceptance_length.py uses this head for Llama-3.1-8B"),
    DraftSpec("eagle3", "RedHatAI/Qwen3-8B-speculator.eagle3", ("qwen3",), 0.4e9, False,
              "vLLM tests/v1/spec_decode/test_acceptance_length.py (Qwen3-8B EAGLE3)"),
    DraftSpec("dflash", "z-lab/Qwen3-8B-DFlash-b16", ("qwen3",), 1.0e9, True, "DFlash (z-lab) release for Qwen3-8B"),
    DraftSpec("mtp", None, ("deepseek-v3",), 14e9 / 61, False,
              "DeepSeek-V3 technical report: one native MTP module (one transformer block + shared head)"),
)


@dataclass(frozen=True)
class AcceptancePrior:
    """Per-position acceptance rates (unconditional: share of steps whose j-th draft token is accepted)."""

    method: str
    families: tuple[str, ...]
    per_position: tuple[float, ...]
    source: str

    def tokens_per_step(self, k: int) -> float:
        """E = 1 + sum of the first k rates; beyond the measured positions the last ratio is extrapolated."""
        rates = list(self.per_position)
        while len(rates) < k:
            ratio = rates[-1] / rates[-2] if len(rates) > 1 and rates[-2] > 0 else 0.5
            rates.append(rates[-1] * ratio)
        return 1.0 + sum(rates[:k])


PRIORS: tuple[AcceptancePrior, ...] = (
    AcceptancePrior("eagle3", ("llama3",), (0.73, 0.52, 0.35),
                    "priors.md: vLLM CI test_acceptance_length.py, Llama-3.1-8B EAGLE3 k=3 MT-Bench T=0 (AL 2.60)"),
    AcceptancePrior("eagle3", ("qwen3",), (0.65, 0.40, 0.20),
                    "priors.md: vLLM CI test_acceptance_length.py, Qwen3-8B EAGLE3 k=3 MT-Bench T=0 (AL 2.26)"),
    AcceptancePrior("mtp", ("deepseek-v3",), (0.85,),
                    "priors.md: DeepSeek-V3 technical report, second-token acceptance 85-90% (lower bound)"),
    AcceptancePrior("mtp", ("gemma4",), (0.844, 0.599, 0.385, 0.271),
                    "priors.md: user report, Gemma-4 MTP per-position acceptance at k=4"),
)


def drafts_for(model: ModelSpec) -> list[DraftSpec]:
    """Drafts and heads known to work with this target (same family, so same vocabulary)."""
    found = [d for d in DRAFTS if model.family in d.families]
    if model.mtp_layers > 0 and not any(d.method == "mtp" for d in found):
        per_layer = model.matmul_params / max(model.num_layers, 1)
        found.append(DraftSpec("mtp", None, (model.family,), per_layer, False, f"{model.source}: native MTP layers"))
    return found


def prior_for(method: str, model: ModelSpec) -> AcceptancePrior | None:
    for prior in PRIORS:
        if prior.method == method and model.family in prior.families:
            return prior
    return None
