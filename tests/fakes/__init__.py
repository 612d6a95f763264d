"""Test doubles that are real programs: local HTTP servers speaking the Gemini and OpenAI APIs, and a toy
kernel family whose knobs really change speed on the CPU."""
