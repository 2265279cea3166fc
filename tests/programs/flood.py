"""A flooding agent program for the relay-cap test (standard library only),
run inside a SandboxRuntime by tests/helpers/abuse_helpers.py.

It opens `argv[1]` connections at once to each relay of its sandbox: the
proxy (HTTP_PROXY), the interception server (OPENAI_BASE_URL) and its MCP
tool server (the first URL in ROLLKIT_MCP_SERVERS), sends nothing on them
(idle connections are what starve a server), and sorts what each got
within a second: an HTTP status ("503", "429", ...), "closed" (end of
file, no answer), "held" (still open, nothing said) or "error" (the connect
failed); it keeps those held and closes the others, as a client does. The
three relays are flooded one after the other, while holding a connection to the model it opened
(and showed its key on) before: then it writes the counts to counts.json
({relay: {outcome: n}}) and makes one model call on that connection, so the
test learns, in its model, that the flood is in place. It exits 0 once
answered, holding every connection until then.
"""

import asyncio
import collections
import json
import os
import http.client
import sys
import time
import urllib.parse

N = int(sys.argv[1])
BASE = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])
PROXY = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
MCP = urllib.parse.urlsplit(next(iter(json.loads(os.environ["ROLLKIT_MCP_SERVERS"]).values())))
CONNECTION = http.client.HTTPConnection(BASE.hostname, BASE.port, timeout=300)


async def attempt(host, port, counts, held):
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        counts["error"] += 1
        return
    try:
        first = await asyncio.wait_for(reader.read(64), 1)
    except TimeoutError:
        counts["held"] += 1
        held.append(writer)
        return
    except OSError:
        first = b""
    counts[first.split()[1].decode() if first.startswith(b"HTTP/") else "closed"] += 1
    writer.close()  # answered or closed: a client lets go of it (the sandbox's own relay needs the slot)


async def flood():
    results, held = {}, []
    relays = {"proxy": PROXY, "interception": BASE, "mcp": MCP}
    for name, url in relays.items():  # one after the other: the sandbox's own relay takes 1,024 at once
        counts = collections.Counter()
        await asyncio.gather(*(attempt(url.hostname, url.port, counts, held) for _ in range(N)))
        results[name] = dict(counts)
        assert call(CONNECTION, "GET", "/models")[0] == 200  # it is not idle: the server keeps it
    return results, held


def call(connection, method, path, body=None):
    connection.request(method, BASE.path + path, body=body, headers={
        "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}", "Content-Type": "application/json"})
    answer = connection.getresponse()
    return answer.status, answer.read()


def main():
    # Its own connection to the model, opened (and shown its key) before the
    # flood fills the relays: the flood must not shut out its own last call.
    assert call(CONNECTION, "GET", "/models")[0] == 200
    started = time.monotonic()
    results, held = asyncio.run(flood())
    json.dump({**results, "seconds": round(time.monotonic() - started, 1)}, open("counts.json", "w"))
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "flooded"}]})
    status, answer = call(CONNECTION, "POST", "/chat/completions", body)  # answered once the other rollout is done
    assert status == 200, answer
    return held  # held to the end: the process's exit closes them


main()
