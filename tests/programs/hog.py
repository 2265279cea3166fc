"""An abusive agent program for the server-abuse tests (standard library only).

It opens `argv[1]` connections to the interception server at once, asks
`GET /v1/models` with the rollout's key on each and keeps every connection
that was answered 200; then it makes one model call on a connection it
holds (so the test learns, in its model, that the hog is holding them),
writes what each attempt got to counts.json ({"200": n, "429": n, "503":
n, "error": n}) and exits 0.
"""

import asyncio
import collections
import json
import os
import resource
import sys
import urllib.parse

BASE = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])
KEY = os.environ["OPENAI_API_KEY"]


def request(method, path, body=b""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: {BASE.netloc}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def answer(reader):
    """The status and body of one response."""
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def attempt(held, counts):
    try:
        reader, writer = await asyncio.open_connection(BASE.hostname, BASE.port)
        writer.write(request("GET", BASE.path + "/models"))
        status, _ = await answer(reader)
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
        counts["error"] += 1
        return
    counts[str(status)] += 1
    if status == 200:
        held.append((reader, writer))
    else:
        writer.close()


async def main():
    sys.stdin.readline()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the hog's own descriptors are not the point
    held, counts = [], collections.Counter()
    await asyncio.gather(*(attempt(held, counts) for _ in range(int(sys.argv[1]))))
    reader, writer = held[0]
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "holding"}]}).encode()
    writer.write(request("POST", BASE.path + "/chat/completions", body))
    status, _ = await answer(reader)
    counts[f"model {status}"] += 1
    with open("counts.json", "w") as f:
        json.dump(counts, f)


if __name__ == "__main__":
    asyncio.run(main())
