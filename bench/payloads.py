"""Realistic, compressible record payloads: JSON-like e-commerce/clickstream events with varied
fields (random IDs that do not compress, repeated keys and vocabularies that do). Deterministic
for a given seed, so every run of the benchmark produces the same pool.

Kafka's ProducerPerformance picks a random line of the pool for every record; the pool is large
enough (tens of thousands of distinct lines) that one producer batch rarely repeats a line, so
lz4 sees the redundancy of real event streams, not copies of one record.
"""

import json
import random

_WORDS = (
    "order checkout cart payment shipped delivered refund invoice customer session login logout "
    "search click view product review rating discount coupon stock warehouse carrier tracking "
    "express standard priority failed retry timeout accepted declined pending settled account "
    "profile update address email basket wishlist gift voucher return exchange support ticket"
).split()
_COUNTRIES = ["DE", "FR", "US", "GB", "NL", "SE", "PL", "ES", "IT", "JP", "BR", "IN", "CA", "AU",
              "CH", "AT"]
_AGENTS = [
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{a}.0.{b}.{c} Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_{c} like Mac OS X) AppleWebKit/605.1.15 Mobile/15E{b} Safari/604.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:{a}.0) Gecko/20100101 Firefox/{a}.0",
    "okhttp/4.{c}.{a} (android {c}; build {b})",
]


def _event(rnd, target):
    size = max(300, int(rnd.gauss(target, target * 0.2)))
    items = []
    event = {
        "event_id": "%032x" % rnd.getrandbits(128),
        "type": rnd.choice(_WORDS) + "." + rnd.choice(_WORDS),
        "ts": 1767225600000 + rnd.randrange(86_400_000),
        "user": {
            "id": rnd.randrange(10_000_000),
            "country": rnd.choice(_COUNTRIES),
            "segment": rnd.choice(["free", "pro", "enterprise", "trial"]),
            "agent": rnd.choice(_AGENTS).format(a=rnd.randrange(90, 130), b=rnd.randrange(1000, 7000),
                                                c=rnd.randrange(1, 20)),
        },
        "session": "%016x" % rnd.getrandbits(64),
        "amount": round(rnd.lognormvariate(3, 1.2), 2),
        "currency": rnd.choice(["EUR", "USD", "GBP", "JPY", "SEK"]),
        "items": items,
        "tags": rnd.sample(_WORDS, rnd.randrange(1, 5)),
    }
    length = len(json.dumps(event, separators=(",", ":")))
    while length < size - 60:
        item = {"sku": "SKU-%06d" % rnd.randrange(200_000), "qty": rnd.randrange(1, 9),
                "price": round(rnd.uniform(1, 500), 2), "name": " ".join(rnd.sample(_WORDS, 3))}
        items.append(item)
        length += len(json.dumps(item, separators=(",", ":"))) + 1
    event["note"] = " ".join(rnd.choice(_WORDS) for _ in range(max(1, (size - length) // 8)))
    return json.dumps(event, separators=(",", ":"))


def write_pool(path, count, mean_size, seed=1279):
    """Writes `count` newline-separated payloads; returns their mean size in bytes."""
    rnd = random.Random(seed)
    total = 0
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(count):
            line = _event(rnd, mean_size)
            total += len(line.encode())
            f.write(line)
            f.write("\n")
    return total / count
