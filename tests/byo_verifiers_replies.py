"""The scripted model of the verifiers proofs (tests/test_verifiers_tasks.py),
free of verifiers so the test process can serve it: on the capitals taskset
(tests/byo_verifiers_taskset.py) it writes the capital into the notes, then
answers, except on Japan, where it answers wrong without notes.
"""

from __future__ import annotations

import json
from typing import Any

from helpers.scripted_provider import text

__all__ = ["QUESTIONS", "reply"]

QUESTIONS = [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo")]


def reply(messages: list[dict[str, Any]]) -> Any:
    question = next(text(m.get("content")) for m in messages if m["role"] == "user")
    country = question.rsplit(" ", 1)[-1].rstrip("?")
    capital = dict(QUESTIONS)[country]
    if country == "Japan":
        return "I think it is Kyoto."
    if not any(m["role"] == "tool" for m in messages):
        return {"tool": "notes_write", "arguments": {"text": f"capital of {country}: {capital}"}}
    noted = [text(m.get("content")) for m in messages if m["role"] == "tool"]
    return f"The capital is {capital}. ({json.dumps(noted[-1])})"
