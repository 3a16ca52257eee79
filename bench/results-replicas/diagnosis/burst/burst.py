import json, random, sys, threading, time, urllib.request, collections
url = sys.argv[1]; rounds = int(sys.argv[2]); n = int(sys.argv[3])
words = "hot zoo now ice mat fur can cub guy van gun kit ivy pie inn arm old tea emu gum cat lie him ink rod was day".split()
rng = random.Random(7)
def post(body, out, i):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        out[i] = (r.headers.get("x-warmpath-replica"), r.headers.get("x-warmpath-cached-tokens"), json.loads(r.read())["usage"].get("prompt_tokens_details", {}))
for k in range(rounds):
    prefix = " ".join(rng.choice(words) for _ in range(2048))
    out = [None] * n; ts = []
    for i in range(n):
        body = {"model": "tiny", "prompt": prefix + " " + " ".join(rng.choice(words) for _ in range(64)), "max_tokens": 8}
        t = threading.Thread(target=post, args=(body, out, i)); t.start(); ts.append(t)
        time.sleep(0.02)
    for t in ts: t.join()
    reps = collections.Counter(o[0] for o in out)
    print(f"round {k}: {n} requests with one new 2048-token prefix, 20 ms apart -> replicas {dict(reps)}; engine cached tokens {[ (o[2] or {}).get('cached_tokens') for o in out]}")
    time.sleep(1.5)
