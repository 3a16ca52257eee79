"""A real libzmq peer (pyzmq) for tests/pyzmq.rs: a publisher, a vLLM- or SGLang-style replay server or a
subscriber. Messages are frames in hex joined by ':'. Prints the bound port (or what it
receives) on stdout; exits after a minute whatever happens."""
import sys
import time

import zmq

DEADLINE = time.monotonic() + 60
END_SEQ = b"\xff" * 8


def frames(arg):
    return [bytes.fromhex(f) for f in arg.split(":")]


def main():
    mode = sys.argv[1]
    ctx = zmq.Context()
    if mode == "pub":
        how, endpoint, messages = sys.argv[2], sys.argv[3], [frames(m) for m in sys.argv[4:]]
        sock = ctx.socket(zmq.PUB)
        if how == "bind":
            port = sock.bind_to_random_port(endpoint)
            print(port, flush=True)
        else:
            sock.connect(endpoint)
            print(0, flush=True)
        while time.monotonic() < DEADLINE:
            for m in messages:
                sock.send_multipart(m)
            time.sleep(0.02)
    elif mode in ("replay", "replay-sglang"):
        # vLLM's replies carry the topic; SGLang's leave it out.
        with_topic = mode == "replay"
        kept = [frames(m) for m in sys.argv[2:]]
        sock = ctx.socket(zmq.ROUTER)
        print(sock.bind_to_random_port("tcp://127.0.0.1"), flush=True)
        while time.monotonic() < DEADLINE:
            if not sock.poll(100):
                continue
            identity, delimiter, start = sock.recv_multipart()
            assert delimiter == b"", delimiter
            start = int.from_bytes(start, "big")
            for topic, seq, payload in kept:
                if int.from_bytes(seq, "big") >= start:
                    head = [identity, b"", topic] if with_topic else [identity, b""]
                    sock.send_multipart(head + [seq, payload])
            end = [identity, b"", b""] if with_topic else [identity, b""]
            sock.send_multipart(end + [END_SEQ, b""])
    elif mode == "sub":
        endpoint, topic, count = sys.argv[2], bytes.fromhex(sys.argv[3]), int(sys.argv[4])
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, topic)
        sock.connect(endpoint)
        for _ in range(count):
            if not sock.poll(int((DEADLINE - time.monotonic()) * 1000)):
                sys.exit("nothing received")
            print(":".join(f.hex() for f in sock.recv_multipart()), flush=True)
    else:
        sys.exit(f"unknown mode {mode}")


main()
