"""A tiny agent program on the standard library only (urllib, no openai SDK),
so it starts in a few milliseconds: for tests that need a real program but
not a real SDK. It reads the conversation from stdin like any program run by
ProgramHarness and calls OPENAI_BASE_URL with OPENAI_API_KEY.

argv[1] picks the behaviour:

- "swallow-error": one model call; an error answer is caught, printed to
  stderr, and the program exits 0 anyway.
- "crash-between-turns" (persistent): answers the first turn and yields, then
  waits until the test opens crash.fifo for writing, and exits 3 with a
  message on stderr, before the user's next turn.
- "spawn-answer MARKER": first starts a grandchild (a sleeping python
  carrying MARKER in its argv, its pid in child.pid) that it never cleans
  up, then makes one model call and writes the answer to answer.txt: to
  prove nothing a program leaves behind survives an interrupted run.
- "fault": the fault suite's program, led by the last user message: one
  containing "exit" makes one model call and exits 4 with a message on
  stderr; "hang" makes one model call and then never ends; anything else
  makes one model call and exits 0.
"""

import json
import threading
import os
import subprocess
import sys
import urllib.error
import urllib.request


def call(messages):
    """One chat completion; returns (status, body)."""
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ.get("ROLLKIT_MODEL", "m"), "messages": messages}).encode(),
        headers={"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def main():
    mode = sys.argv[1]
    messages = json.loads(sys.stdin.readline())["messages"]
    if mode == "spawn-answer":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", sys.argv[2]])
        with open("child.pid", "w") as f:
            f.write(str(child.pid))
        status, body = call(messages)
        with open("answer.txt", "w") as f:
            f.write(body["choices"][0]["message"]["content"] if status == 200 else "")
        return 0
    status, body = call(messages)
    if mode == "fault":
        asked = messages[-1]["content"]
        if "exit" in asked:
            print("the program failed on purpose", file=sys.stderr)
            return 4
        if "hang" in asked:
            threading.Event().wait()  # until killed
        return 0
    if mode == "swallow-error":
        if status != 200:
            print(f"caught HTTP {status}: {body['error']['message']}", file=sys.stderr)
        return 0
    if mode == "crash-between-turns":
        print(json.dumps({"yield": body["choices"][0]["message"]["content"]}), flush=True)
        with open("crash.fifo") as fifo:  # blocks until the test opens it
            fifo.read()
        print("the program crashed between turns on purpose", file=sys.stderr)
        return 3
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main())
