"""The OpenAI-compatible proposer: any chat-completions endpoint (mlx_lm.server, Ollama, vLLM, LM Studio, or
OpenAI itself). Structured replies ask for a JSON schema (`response_format`); servers that ignore it still get
their text parsed and validated. Local servers need no key; api.openai.com needs `OPENAI_API_KEY`."""
from __future__ import annotations

import os

from pydantic import BaseModel

from .base import ProposerError
from .llm import LLMProposer, RawReply, Retryable

KEY_ENV = "OPENAI_API_KEY"


class OpenAIProposer(LLMProposer):
    name = "openai"
    provider = "OpenAI-compatible"

    def __init__(self, *, model: str | None = None, api_key: str | None = None, base_url: str | None = None,
                 temperature: float = 0.4, **kw):
        if not model:
            raise ProposerError("the OpenAI-compatible proposer needs a model name (--model, e.g. the one your "
                                "mlx_lm.server or Ollama serves)")
        super().__init__(model=model, **kw)
        key = api_key or os.environ.get(KEY_ENV)
        if not key:
            if base_url is None:
                raise ProposerError(f"no OpenAI API key: set {KEY_ENV}, or give --base-url for a local server "
                                    f"(mlx_lm.server, Ollama). The offline proposer needs neither: --proposer offline")
            key = "not-needed"   # local servers accept any key
        try:
            import openai
        except ImportError:
            raise ProposerError("the openai package is not installed: pip install 'ksearch[openai]' (or pip install openai), or use --proposer offline") from None
        self._openai = openai
        self.client = openai.OpenAI(api_key=key, base_url=base_url, timeout=self.timeout_s, max_retries=0)
        self.temperature = temperature

    def _send(self, system: str, prompt: str, schema: type[BaseModel] | None) -> RawReply:
        oa = self._openai
        kw = {}
        if schema is not None:
            kw["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()}}
        try:
            resp = self.client.chat.completions.create(
                model=self.model, temperature=self.temperature,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}], **kw)
        except oa.APITimeoutError:
            raise Retryable(f"no reply within {self.timeout_s:.0f} s") from None
        except oa.APIConnectionError as e:
            raise Retryable(f"connection failed ({e})") from None
        except oa.APIStatusError as e:
            code = e.status_code
            if code == 429 or code >= 500:
                raise Retryable(f"HTTP {code} ({'rate limited' if code == 429 else 'server error'})") from None
            if code in (401, 403):
                raise ProposerError(f"the server refused the key (HTTP {code}): check {KEY_ENV}") from None
            raise ProposerError(f"request failed (HTTP {code}): {e.message}") from None
        except oa.OpenAIError as e:
            raise ProposerError(f"request failed: {type(e).__name__}: {e}") from None
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        u = resp.usage
        return RawReply(text=text, tokens_in=(u.prompt_tokens or 0) if u else 0,
                        tokens_out=(u.completion_tokens or 0) if u else 0)
