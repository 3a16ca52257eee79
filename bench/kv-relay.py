"""bench/kv-relay.py: carries vLLM's KV events from several engines to one subscriber.

Usage: python kv-relay.py SUBSCRIBER_ENDPOINT ENGINE_ENDPOINT...

Each engine binds its ZMQ publisher (``--kv-events-config`` endpoint ``tcp://*:PORT``, so that
warmpath can connect to each one); llm-d's EPP in global-socket mode binds one SUB socket and
expects every engine to connect to it. This relay connects a SUB socket to every engine and a
PUB socket to the EPP, and forwards every message as it came (topic, sequence, payload), so both
routers read the same engines' events in one run. Runs until killed. pyzmq comes with vLLM.
"""

import sys

import zmq


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    for endpoint in sys.argv[2:]:
        sub.connect(endpoint)
    pub = ctx.socket(zmq.PUB)
    pub.connect(sys.argv[1])
    zmq.proxy(sub, pub)


if __name__ == "__main__":
    main()
