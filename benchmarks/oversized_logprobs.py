"""Benchmark: a reply whose top_logprobs make it tens of MB (issue 48), through
OpenAIModel and its `max_logprobs` bound, in a fresh process.

A fake provider on 127.0.0.1 (tests/helpers/fake_provider.py, the real protocol)
answers --tokens tokens with --top alternatives each; the rollout's call is
refused (ProviderError naming the limit) and nothing of the logprobs is kept.
Prints the answer's size, the wall time, whether the call was refused, and
the process's peak RSS (most of it the openai SDK parsing the answer, before
the bound is checked; the fake provider building it runs in the same process).

Run: PYTHONPATH=. python benchmarks/oversized_logprobs.py [--tokens 2500] [--top 400] [--json PATH]
"""

from __future__ import annotations

import argparse

from _common import Results, in_fresh_python, json_option

_RUN = r'''
import asyncio, json, sys, time
sys.path.insert(0, "tests")
from helpers.fake_provider import FakeProvider
import rollkit as rk
from rollkit.programs.openai_model import OpenAIModel
tokens, top = int(sys.argv[1]), int(sys.argv[2])
def rss():
    with open("/proc/self/status") as f:
        return round(next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024)
async def main():
    fake = await FakeProvider(replies=[[(f" w{i}", -0.25) for i in range(tokens)]]).start()
    model = OpenAIModel("qwen-test", base_url=fake.url, api_key="none", params={"logprobs": True, "top_logprobs": top})
    began = time.perf_counter()
    trace = await rk.Agent(model=model).run(rk.Task(prompt="hi"))
    took = time.perf_counter() - began
    size = len(json.dumps(fake.answers[0]))
    await model.aclose()
    await fake.stop()
    call = trace.model_calls[0]
    print(json.dumps({"mb": size / 1e6, "seconds": took, "refused": call.error is not None,
                      "kept": call.tokens is not None, "peak_mb": rss(),
                      "error": call.error.message[:200] if call.error else None}))
asyncio.run(main())
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2500)
    parser.add_argument("--top", type=int, default=400)
    json_option(parser)
    args = parser.parse_args()
    got = in_fresh_python(_RUN, str(args.tokens), str(args.top))
    print(f"{args.tokens:,} tokens x {args.top} alternatives: a {got['mb']:.1f} MB answer, {got['seconds']:.1f} s, "
          f"refused={got['refused']}, logprobs kept={got['kept']}, peak RSS {got['peak_mb']:,} MB; {got['error']}")
    results = Results("oversized_logprobs.py", f"a reply of {args.tokens:,} tokens x {args.top} top_logprobs through "
                      f"OpenAIModel's max_logprobs bound (refused: {got['refused']}, logprobs kept: {got['kept']})")
    results.add("the answer's size", got["mb"], "MB")
    results.add("wall time of the rollout", got["seconds"], "s")
    results.add("peak RSS of the process (VmHWM)", got["peak_mb"], "MB")
    results.save(args.json)


if __name__ == "__main__":
    main()
