"""Proposers: who writes the plans and the candidates. One protocol (`base.Proposer`), three implementations:
`offline` (the default: family templates steered by the plan tree, no network), `gemini` (google-genai) and
`openai` (any OpenAI-compatible endpoint: mlx_lm.server, Ollama, vLLM, LM Studio)."""
from __future__ import annotations

from .base import Attempt, CandidateDraft, ProposeContext, Proposer, ProposerError, Usage, extract_code

__all__ = ["Attempt", "CandidateDraft", "ProposeContext", "Proposer", "ProposerError", "Usage", "extract_code",
           "make_proposer"]


def make_proposer(req, *, family=None, cache_dir: str | None = None, api_key: str | None = None) -> Proposer:
    """The proposer a SearchRequest asks for (`req.proposer`, `req.model`, `req.base_url`, `req.seed`)."""
    name = getattr(req, "proposer", "offline")
    if name == "offline":
        from .offline import OfflineProposer
        return OfflineProposer(family, seed=getattr(req, "seed", 0))
    if name == "gemini":
        from .gemini import GeminiProposer
        return GeminiProposer(model=req.model, api_key=api_key, base_url=req.base_url, cache_dir=cache_dir,
                              family=family)
    if name == "openai":
        from .openai_compat import OpenAIProposer
        return OpenAIProposer(model=req.model, api_key=api_key, base_url=req.base_url, cache_dir=cache_dir,
                              family=family)
    raise ProposerError(f"unknown proposer '{name}': choose offline, gemini or openai")
