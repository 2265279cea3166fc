"""A reply whose logprobs are oversized (rollkit.programs.openai_model's
`max_logprobs`): refused with a message naming the limit, nothing of it kept,
and a program behind the interception server reads a 502 saying so."""

from __future__ import annotations

import json
import sys

from helpers.fake_provider import FakeProvider

import rollkit as rk
from rollkit.programs.openai_model import MAX_LOGPROBS, OpenAIModel

_REPLY = [[(f" w{i}", -0.25) for i in range(40)]]  # 40 tokens
_PROGRAM = """
import json, os, sys
import openai
client = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
out = {}
for k in (2, 50):
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True,
                                       top_logprobs=k)
        out[k] = "200"
    except openai.APIStatusError as exc:
        out[k] = f"{exc.status_code} {exc.body['message'] if isinstance(exc.body, dict) else exc.body}"
json.dump(out, open(sys.argv[1], "w"))
"""


async def test_an_oversized_logprobs_reply_is_refused_through_the_interception_server(tmp_path):
    program, answers = tmp_path / "program.py", tmp_path / "answers.json"
    program.write_text(_PROGRAM)
    fake = await FakeProvider(replies=_REPLY).start()
    model = OpenAIModel("qwen-test", base_url=fake.url, api_key="none", max_logprobs=1000)
    try:
        harness = rk.ProgramHarness([sys.executable, str(program), str(answers)])
        trace = await rk.Agent(model=model, harness=harness, runtime=rk.SubprocessRuntime).run(rk.Task(prompt="hi"))
    finally:
        await model.aclose()
        await fake.stop()
    got = json.loads(answers.read_text())
    # 40 tokens x (1 + 2) = 120 values pass; 40 x (1 + 50) = 2,040 are more than 1,000.
    assert got["2"] == "200"
    assert got["50"].startswith("502 ")
    assert "logprobs hold 2,040 values (its tokens and their alternatives), more than this model keeps (1,000, " \
           "OpenAIModel(max_logprobs=...)): ask for fewer top_logprobs" in got["50"]
    first, second = trace.model_calls
    assert first.tokens is not None and len(first.tokens.logprobs) == 40
    assert second.tokens is None and second.error is not None and "2,040 values" in second.error.message
    assert MAX_LOGPROBS == 1 << 19
