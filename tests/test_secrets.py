"""Rollout secrets: a program can be handed its secret on a command line.

A secret goes to programs as an API key, and some take their key as a
separate argument (`aider --openai-api-key KEY`). A secret starting with "-"
(one `token_urlsafe` in 64) is read as an option there and the rollout fails
at random; every secret starts with `rk-` instead.
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.parse

import rollkit as rk
from rollkit.core.context import SECRET_PREFIX, new_secret

DRAWS = 10_000
# RFC 9110 token characters: a header value made of them needs no quoting.
HEADER_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def test_ten_thousand_secrets_never_start_with_a_dash_and_fit_headers_urls_and_argv():
    secrets = [new_secret() for _ in range(DRAWS)]
    assert len(set(secrets)) == DRAWS
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--openai-api-key")
    for secret in secrets:
        assert secret.startswith(SECRET_PREFIX) and not secret.startswith("-")
        assert re.fullmatch(r"rk-[A-Za-z0-9_-]{32}", secret)
        assert HEADER_TOKEN.fullmatch(secret)
        assert urllib.parse.quote(secret, safe="") == secret  # as it is in ?key=
        # A separate argument, as aider and Qwen Code take their key.
        assert parser.parse_args(["--openai-api-key", secret]).openai_api_key == secret


# A real program with an argparse command line, given its key as a separate
# argument by a shell wrapper, as people run aider under ProgramHarness.
ARGPARSE_PROGRAM = """
import argparse, sys
parser = argparse.ArgumentParser()
parser.add_argument("--openai-api-key", required=True)
parser.add_argument("--model")
args = parser.parse_args()
sys.stdin.read()
open("key.txt", "w").write(args.openai_api_key)
"""


class ReadsKey(rk.Task):
    async def setup(self, ctx):
        ctx.runtime.write("prog.py", ARGPARSE_PROGRAM)

    async def finalize(self, ctx):
        ctx.state["key"] = ctx.runtime.read("key.txt")


async def test_a_program_taking_the_secret_as_a_separate_argument_parses_it():
    argv = ["/bin/sh", "-c", f'exec {sys.executable} prog.py --openai-api-key "$OPENAI_API_KEY" --model m']
    agent = rk.Agent(model=rk.ScriptedModel(["x"]), harness=rk.ProgramHarness(argv), runtime=rk.SubprocessRuntime)
    rollout = agent.rollout(ReadsKey(prompt="go"))
    assert await rollout.open(), rollout.trace.errors
    await rollout.step()
    trace = await rollout.close()
    assert trace.ok, trace.errors
    assert rollout.ctx.state["key"] == rollout.ctx.secret and rollout.ctx.secret.startswith("rk-")
