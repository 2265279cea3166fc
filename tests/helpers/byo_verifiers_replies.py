"""The scripted model of the verifiers proofs (tests/test_verifiers_tasks.py),
free of verifiers so the test process can serve it: on the capitals taskset
(tests/helpers/byo_verifiers_taskset.py) it writes the capital into the notes, then
answers, except on Japan, where it answers wrong without notes. As the
judge of verifiers' reference judge (its prompt holds "Reference answer:"),
it says "yes" when the graded response contains the reference answer.
"""

from __future__ import annotations

import json
from typing import Any

from helpers.scripted_provider import text

__all__ = ["QUESTIONS", "reply"]

QUESTIONS = [("France", "Paris"), ("Italy", "Rome"), ("Japan", "Tokyo"), ("Spain", "Madrid"), ("Germany", "Berlin")]


def _fenced(prompt: str, heading: str) -> str:
    return prompt.split(f"{heading}\n```\n", 1)[1].split("\n```", 1)[0]


def reply(messages: list[dict[str, Any]]) -> Any:
    question = next(text(m.get("content")) for m in messages if m["role"] == "user")
    if "Reference answer:" in question:
        return "yes" if _fenced(question, "Reference answer:") in _fenced(question, "Response:") else "no"
    country = question.rsplit(" ", 1)[-1].rstrip("?")
    capital = dict(QUESTIONS)[country]
    if country == "Japan":
        return "I think it is Kyoto."
    if not any(m["role"] == "tool" for m in messages):
        return {"tool": "notes_write", "arguments": {"text": f"capital of {country}: {capital}"}}
    noted = [text(m.get("content")) for m in messages if m["role"] == "tool"]
    return f"The capital is {capital}. ({json.dumps(noted[-1])})"
