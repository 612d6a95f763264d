"""The Gemini proposer, through google-genai: structured JSON for analysis and tree edits (the pydantic type is
the `response_schema`), free text with one code block for candidates. The key comes from the argument or
`GEMINI_API_KEY`; `base_url` points the client elsewhere (a proxy, or the tests' local server)."""
from __future__ import annotations

import os

from pydantic import BaseModel

from .base import ProposerError
from .llm import LLMProposer, RawReply, Retryable

DEFAULT_MODEL = "gemini-2.5-pro"
KEY_ENV = "GEMINI_API_KEY"


class GeminiProposer(LLMProposer):
    name = "gemini"
    provider = "Gemini"

    def __init__(self, *, model: str | None = None, api_key: str | None = None, base_url: str | None = None,
                 temperature: float = 0.4, **kw):
        super().__init__(model=model or DEFAULT_MODEL, **kw)
        key = api_key or os.environ.get(KEY_ENV)
        if not key:
            raise ProposerError(f"no Gemini API key: set {KEY_ENV} (or pass the key in; the editor keeps it in its "
                                f"secret storage). The offline proposer needs no key: --proposer offline")
        try:
            from google import genai
            from google.genai import types
        except ImportError:
            raise ProposerError("google-genai is not installed: pip install google-genai==3.6.1, "
                                "or use --proposer offline") from None
        self._types = types
        http = types.HttpOptions(base_url=base_url, timeout=int(self.timeout_s * 1000),
                                 retry_options=types.HttpRetryOptions(attempts=1))
        self.client = genai.Client(api_key=key, http_options=http)
        self.temperature = temperature

    def _send(self, system: str, prompt: str, schema: type[BaseModel] | None) -> RawReply:
        from google.genai import errors

        cfg = {"system_instruction": system, "temperature": self.temperature}
        if schema is not None:
            cfg.update(response_mime_type="application/json", response_schema=schema)
        try:
            resp = self.client.models.generate_content(
                model=self.model, contents=prompt, config=self._types.GenerateContentConfig(**cfg))
        except errors.APIError as e:
            code = getattr(e, "code", None) or 0
            if code == 429 or code >= 500:
                raise Retryable(f"HTTP {code} ({'rate limited' if code == 429 else 'server error'})") from None
            if code in (401, 403):
                raise ProposerError(f"Gemini refused the key (HTTP {code}): check {KEY_ENV}") from None
            raise ProposerError(f"Gemini request failed (HTTP {code}): {getattr(e, 'message', e)}") from None
        except Exception as e:  # noqa: BLE001 - the HTTP library (httpx or httpx2) is the client's choice
            names = {c.__name__ for c in type(e).__mro__}
            if names & {"TimeoutException", "TimeoutError"}:
                raise Retryable(f"no reply within {self.timeout_s:.0f} s") from None
            if names & {"TransportError", "ConnectionError", "NetworkError"}:
                raise Retryable(f"connection failed ({type(e).__name__})") from None
            raise ProposerError(f"Gemini request failed: {type(e).__name__}: {e}") from None
        try:
            text = resp.text or ""
        except ValueError:  # no text part (blocked or empty)
            text = ""
        um = resp.usage_metadata
        return RawReply(text=text, tokens_in=(um.prompt_token_count or 0) if um else 0,
                        tokens_out=(um.candidates_token_count or 0) if um else 0)
