"""stagecraft run --data FILE --data-order: the documented order reaches training (tests/cli).

Sequential order: step 0's global batch of B = 8 sequences of T = 64 tokens (tiny-cpu, tiny) is
the 8 windows of T + 1 tokens from token 0 on, i.e. tokens [0, 8 * 64] = the first 513. Two files
that agree on those 513 tokens and differ after them must give the same first-step loss in
sequential order (bit for bit: same parameters, same batch), and different ones in the hashed
order (its windows lie anywhere in the file). Bad input exits 2 naming what is wrong.
Usage: data_order.py STAGECRAFT"""
import json
import os
import random
import struct
import sys
import tempfile

from clitest import Checks, call

stagecraft = sys.argv[1]
check = Checks()
d = tempfile.mkdtemp(prefix="stagecraft_data_order_")
first_batch = 8 * 64 + 1
rng = random.Random(5)
head = [rng.randrange(256) for _ in range(first_batch)]


def token_file(name, ids):
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    return path


a = token_file("a.bin", head + [rng.randrange(256) for _ in range(3000)])
b = token_file("b.bin", head + [rng.randrange(256) for _ in range(3000)])
plan = os.path.join(d, "one-rank.json")
with open(plan, "w") as f:
    json.dump({"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "micro_batches": 8}, f)


def first_loss(data, order):
    r = call(stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", plan, "--steps", "1",
             "--data", data, "--data-order", order, "--json", "--skip-memory-check")
    if r.returncode != 0:
        sys.exit(f"FAIL: run --data {data} --data-order {order}: rc {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout)["losses"][0]


seq_a, seq_b = first_loss(a, "sequential"), first_loss(b, "sequential")
check(seq_a == seq_b, f"sequential: files equal on the first 513 tokens give one first-step loss ({seq_a} and {seq_b})")
hashed_a, hashed_b = first_loss(a, "hashed"), first_loss(b, "hashed")
check(hashed_a != hashed_b, f"hashed: the same files give different first-step losses ({hashed_a} and {hashed_b})")

text = os.path.join(d, "corpus.txt")
with open(text, "w") as f:
    f.write("the quick brown fox jumps over the lazy dog. " * 40)
check(first_loss(text, "sequential") > 0, "a .txt file trains as bytes in sequential order")


def refused(args, expect, what):
    r = call(stagecraft, "run", "--model", "tiny", "--training", "tiny-cpu", "--plan", plan, *args)
    check(r.returncode == 2 and expect in r.stderr, f"{what}: exit 2 saying \"{expect}\" (rc {r.returncode}: {r.stderr.strip()})")


refused(["--data-order", "sequential"], "--data-order sequential: reads a file's windows in turn; give the file with --data",
        "sequential order without a file")
odd = os.path.join(d, "odd.bin")
with open(odd, "wb") as f:
    f.write(b"\x01\x00\x02")
refused(["--data", odd], "odd.bin", "a token file with an odd trailing byte")
big = token_file("big.bin", [1, 2, 300, 4] * 200)
refused(["--data", big], "token id 300 is not below the vocab 256", "a token id outside the vocabulary")
check.finish()
